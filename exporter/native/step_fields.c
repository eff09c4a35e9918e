/* Kernel: runs of step lines read by a field table.
 *
 * Its pure-Python twin, exporter/native/step_fields.py, states the grammar and the table's
 * format and defines what read_step_lines returns; tests/test_native.py checks both bit for
 * bit on real and fuzzed lines. The table comes as plain tuples of bytes and numbers: the
 * grammar is the format module's, no field or framework is named here, and no attribute of a
 * Python object is read.
 *
 * Numbers: a plain decimal is read exactly (simple_decimal); other numbers by
 * PyOS_string_to_double, the function behind float(), and a token it does not take whole by
 * float() itself: the values are float()'s. A line is read into C arrays (texts point into
 * the data); Python objects are made once, for the run's result.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>

#include "blocks.h" /* and, with SSE2, emmintrin.h */
#include "doubles.h"

/* Kinds: native/step_fields.py's Kind. */
enum { KIND_FLOAT = 1, KIND_DURATION = 2, KIND_NUMBER_WITH_UNIT = 3, KIND_RECIPROCAL = 4 };

#define MAX_DIGITS 18 /* an int64 for sure; a longer step or total is declined */
#define MAX_NUMBER_TEXT 64
#define MAX_STEP_NAMES 8
#define MAX_PAIRS 64 /* the pairs and segments grammars: a line printing more is declined */
#define MAX_NAME 128 /* the segments grammar: a line printing a longer name is declined */
#define MAX_PERCENT 32 /* the segments grammar: the longest suffix of a percent's name */
#define MAX_RENAMED 16 /* the pairs grammar's options: names read under another name */
#define MAX_MARKS 8 /* the pairs grammar's options: names of which a record prints one */
#define MAX_JSON_INTEGER 300 /* the JSON grammar: a line printing a longer integer is declined (float() of it fails) */

typedef struct {
    const uint8_t *at;
    Py_ssize_t length;
} Text;

typedef struct {
    Text name, absent;
    int kind, series;
    double bare_per_second; /* DURATION: a number without its unit is in units of 1/this second */
    Py_ssize_t column;      /* the value it sets: several names may set one */
} FieldSpec;

typedef struct {
    uint8_t opener, closer, pair_separator, name_separator;
    int pairs;        /* the pairs grammar (``step=1 loss=2``): no opener, no closer */
    int segments;     /* the segments grammar (``iteration 5/ 9 | lm loss: 2.5 |``) */
    int json;         /* the JSON grammar (``{"step": 5, "loss": 2.5}``) */
    /* The JSON grammar: the total's names, names whose lines the per-line reader reads (``dropped``: the prefix
     * dropped from a key before it is normalised). */
    Text total_names[MAX_STEP_NAMES], declines[MAX_MARKS];
    Py_ssize_t total_name_count, decline_count;
    /* The segments grammar: a prefix dropped from names, a named value that must be 0, the name of a segment giving
     * the step, a word before the step's counting another (NeMo's epoch) and that counter's named value (the pairs
     * grammar's options: a word and digits before the pairs, fairseq's ``epoch 001:``, and their named value, and the
     * byte after the digits before a count of a total, 0: none). */
    Text dropped, counted, step_segment, lead, lead_name;
    uint8_t lead_close;
    /* The segments grammar: the byte closing a step printed without its total (nanoGPT's ``iter 10:``; 0: the step
     * prints ``N/TOTAL`` and the pair separator), the suffix of a percent's named value (length 0: none). */
    uint8_t step_close;
    Text percent;
    uint8_t separator[256]; /* the pairs grammar: 1 for each byte besides spaces that ends a value */
    int spaced;             /* the pairs grammar: spaces may follow the name separator (``loss: 2.5``) */
    /* The pairs grammar's options (``options``: given): the step printed ``step_name \\s* open \\s* digits /
     * \\s* digits shut`` before the pairs (open 0: as a pair), named values under normalised names, some under names
     * of their own (an empty one: not read) and without a unit their values print, a value printed as a list its
     * first item (value_open 0: none), names of which a record prints one. */
    int options;
    uint8_t step_open, step_shut, value_open, value_shut;
    Text renamed_from[MAX_RENAMED], renamed_to[MAX_RENAMED], renamed_unit[MAX_RENAMED];
    Py_ssize_t renamed_count;
    Text marks[MAX_MARKS];
    Py_ssize_t mark_count;
    /* The pairs grammar's further options: a count printed before the step that the step counts within (length 0:
     * none) and its four named values (length 0: not kept), the second items of lists kept as named values, words
     * read as numbers, parts of names whose lines are the per-line reader's. */
    Text outer, outer_names[4];
    Text seconds_from[MAX_RENAMED], seconds_to[MAX_RENAMED];
    Py_ssize_t second_count;
    Text words[MAX_RENAMED];
    double word_numbers[MAX_RENAMED];
    Py_ssize_t word_count;
    Text every_value[MAX_MARKS];
    Py_ssize_t every_value_count;
    /* The pairs grammar's last options: ANSI SGR escapes read as absent, a value's second item printed in brackets
     * after its first (item_open 0: none), words that, printed right before a step's name, make a line no record. */
    int escapes;
    uint8_t item_open, item_shut;
    Text not_after[MAX_MARKS];
    Py_ssize_t not_after_count;
    uint8_t name_byte[256]; /* the pairs grammar: the bytes of a name after its first */
    uint8_t ends[256];      /* the pairs grammar: 1 for each byte that may end a value (a space, a separator) */
    /* The pairs grammar: a value of a kept shape's pair is read as a number as its end is found (shaped_pairs): no byte
     * of a plain decimal ends a value, opens a list or shuts a second item. */
    int numbers_ahead;
    Text step_name, tag_open, tag_close;
    Text step_names[MAX_STEP_NAMES]; /* the pairs grammar: the step's names, first printed wins */
    Py_ssize_t step_name_count;
    /* The pairs grammar's step printed after a count in brackets (``Epoch(train) [1][ 10/270]``): its names, the count's
     * named value. */
    Text count_step_names[MAX_STEP_NAMES];
    Py_ssize_t count_step_name_count;
    Text step_count_name;
    FieldSpec *fields;
    Py_ssize_t count;   /* field entries */
    Py_ssize_t columns; /* values they set */
    Py_ssize_t required; /* a column a record prints, -1: none */
} Table;

/* ------------------------------------------------------------------------------------------ */
/* Bytes                                                                                      */

/* Byte classes: str.isspace() for ASCII (what the twin's \s and str.strip() see), a name's first byte and its
 * others, a digit. */
enum { SPACE = 1, NAME_START = 2, NAME = 4, DIGIT = 8 };
static const uint8_t byte_classes[256] = {
    [' '] = SPACE, ['\t' ... '\r'] = SPACE, [0x1c ... 0x1f] = SPACE,
    ['A' ... 'Z'] = NAME_START | NAME, ['a' ... 'z'] = NAME_START | NAME, ['_'] = NAME_START | NAME,
    ['0' ... '9'] = NAME | DIGIT,
};

static int
is_space(uint8_t byte)
{
    return byte_classes[byte] & SPACE;
}

static int
is_name_start(uint8_t byte)
{
    return byte_classes[byte] & NAME_START;
}

static int
is_name(uint8_t byte)
{
    return byte_classes[byte] & NAME;
}

static const uint8_t *
skip_spaces(const uint8_t *at, const uint8_t *end)
{
    while (at < end && is_space(*at)) at++;
    return at;
}

static int
is_digit(uint8_t byte)
{
    return byte_classes[byte] & DIGIT;
}

/* The pair separator at ``at`` is a comma inside a number (1,234.5): exactly three digits follow it. */
static int
is_thousands_separator(const uint8_t *at, const uint8_t *end)
{
    return *at == ',' && end - at > 3 && is_digit(at[1]) && is_digit(at[2]) && is_digit(at[3])
           && (end - at == 4 || !is_digit(at[4]));
}

/* Where a value starting at ``at`` ends: the first pair separator that is not a thousands separator. */
static const uint8_t *
value_end_of(const Table *table, const uint8_t *at, const uint8_t *end)
{
    while (at < end) {
        const uint8_t *separator = memchr(at, table->pair_separator, (size_t)(end - at));
        if (separator == NULL || !is_thousands_separator(separator, end)) return separator ? separator : end;
        at = separator + 1;
    }
    return end;
}

static int
same_text(const uint8_t *at, Py_ssize_t length, Text text)
{
    return length == text.length && same_bytes(at, text.at, length);
}

static int
is_one_of(Text name, const Text *names, Py_ssize_t count)
{
    for (Py_ssize_t i = 0; i < count; i++) {
        if (same_text(name.at, name.length, names[i])) return 1;
    }
    return 0;
}

static int
expect(const uint8_t **at, const uint8_t *end, Text text)
{
    if (end - *at < text.length || !same_text(*at, text.length, text)) return 0;
    *at += text.length;
    return 1;
}

static int
expect_byte(const uint8_t **at, const uint8_t *end, uint8_t byte)
{
    if (*at == end || **at != byte) return 0;
    (*at)++;
    return 1;
}

static int
is_ascii(const uint8_t *at, const uint8_t *end)
{
    uint64_t high = 0;
    for (; end - at >= 8; at += 8) {
        uint64_t word;
        memcpy(&word, at, 8);
        high |= word;
    }
    for (; at < end; at++) high |= *at;
    return (high & UINT64_C(0x8080808080808080)) == 0;
}

/* Where the line at ``line`` ends (its newline, else ``end``), and in ``*ascii`` whether its bytes are all ASCII: one
 * pass over it, sixteen bytes at a time, where a search for its end and a look at its bytes took two. */
static const uint8_t *
line_end(const uint8_t *line, const uint8_t *end, int *ascii)
{
    const uint8_t *at = line;
    unsigned highs = 0; /* the high bits of the bytes before ``at`` */
#ifdef __SSE2__
    const __m128i newline = _mm_set1_epi8('\n');
    for (; end - at >= 16; at += 16) {
        __m128i bytes = _mm_loadu_si128((const __m128i *)at);
        unsigned found = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(bytes, newline));
        unsigned high = (unsigned)_mm_movemask_epi8(bytes);
        if (found) {
            highs |= high & (found ^ (found - 1)); /* the bytes up to the newline (its own is no high byte) */
            *ascii = highs == 0;
            return at + __builtin_ctz(found);
        }
        highs |= high;
    }
#endif
    const uint8_t *newline_at = memchr(at, '\n', (size_t)(end - at));
    const uint8_t *stop = newline_at ? newline_at : end;
    *ascii = highs == 0 && is_ascii(at, stop);
    return stop;
}

/* The line begins with the tag of another stream: ``open`` name bytes ``close``. */
static int
is_tagged(const Table *table, const uint8_t *at, const uint8_t *end)
{
    if (!expect(&at, end, table->tag_open)) return 0;
    const uint8_t *name = at;
    while (at < end && is_name(*at)) at++;
    return at > name && expect(&at, end, table->tag_close);
}

/* Digits at *at as an int64: 0 when there are none; *too_long when more than MAX_DIGITS. */
static int
read_digits(const uint8_t **at, const uint8_t *end, long long *value, int *too_long)
{
    const uint8_t *start = *at;
    long long number = 0;
    for (; *at < end && **at >= '0' && **at <= '9'; (*at)++) {
        if (*at - start < MAX_DIGITS) number = number * 10 + (**at - '0');
    }
    if (*at - start > MAX_DIGITS) *too_long = 1;
    *value = number;
    return *at > start;
}

/* ------------------------------------------------------------------------------------------ */
/* Numbers: native/numbers.py                                                                 */

#include "decimal.h"

/* ``[-+]digits[.digits][e[-+]digits]`` (digits before or after the point): a decimal C's strtod reads as float() does. */
static int
plain_decimal(const uint8_t *at, const uint8_t *end)
{
    int digits = 0;
    if (at < end && (*at == '-' || *at == '+')) at++;
    for (; at < end && is_digit(*at); at++) digits++;
    if (at < end && *at == '.') {
        for (at++; at < end && is_digit(*at); at++) digits++;
    }
    if (digits == 0) return 0;
    if (at < end && (*at == 'e' || *at == 'E')) {
        at++;
        if (at < end && (*at == '-' || *at == '+')) at++;
        if (at == end) return 0;
        for (; at < end && is_digit(*at); at++);
    }
    return at == end;
}

/* float() reads no token holding an ASCII byte other than these (digits, signs, a point, an exponent, underscores,
 * spaces and the letters of inf, infinity and nan): a token holding another is told no number without the
 * interpreter (whose float() would raise, and be caught). Bytes from 0x80 on are float()'s to judge. */
static const uint8_t float_bytes[256] = {
    ['0' ... '9'] = 1, ['+'] = 1, ['-'] = 1, ['.'] = 1, ['_'] = 1, ['e'] = 1, ['E'] = 1, ['i'] = 1, ['I'] = 1,
    ['n'] = 1, ['N'] = 1, ['f'] = 1, ['F'] = 1, ['t'] = 1, ['T'] = 1, ['y'] = 1, ['Y'] = 1, ['a'] = 1, ['A'] = 1,
    [' '] = 1, ['\t' ... '\r'] = 1, [0x1c ... 0x1f] = 1, [0x80 ... 0xff] = 1,
};

static int
may_be_float(const uint8_t *at, const uint8_t *end)
{
    for (; at < end; at++) {
        if (!float_bytes[*at]) return 0;
    }
    return 1;
}

/* A line read without the interpreter (StepsAhead's thread) holds a number only float()'s own function reads. */
#define NEEDS_INTERPRETER (-2)

/* float(token) of a token simple_decimal does not read: 1 and *value, 0 (not a number), -1 (error, raised),
 * NEEDS_INTERPRETER (without ``interpreter``: a token strtod does not read whole). */
static int
parse_unusual_number(const uint8_t *token, Py_ssize_t length, double *value, int interpreter)
{
    if (length == 0 || !may_be_float(token, token + length)) return 0;
    if (length < MAX_NUMBER_TEXT) {
        char text[MAX_NUMBER_TEXT];
        memcpy(text, token, (size_t)length);
        text[length] = '\0';
        char *end = NULL;
        if (plain_decimal(token, token + length)) {
            /* More digits than the exact fast path takes (a float printed with 17): glibc's strtod rounds
             * correctly as float() does, in a third of its time; a locale whose decimal point is not '.' stops it
             * short, and float()'s own function reads the token. */
            double number = strtod(text, &end);
            if (end == text + length) {
                *value = number;
                return 1;
            }
        }
        if (!interpreter) return NEEDS_INTERPRETER;
        double number = PyOS_string_to_double(text, &end, NULL);
        if (end == text + length && !(number == -1.0 && PyErr_Occurred())) {
            *value = number;
            return 1;
        }
        PyErr_Clear();
    }
    if (!interpreter) return NEEDS_INTERPRETER;
    PyObject *string = PyUnicode_DecodeASCII((const char *)token, length, NULL);
    if (string == NULL) return -1;
    PyObject *number = PyFloat_FromString(string); /* underscores, and whatever else float() takes */
    Py_DECREF(string);
    if (number == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_ValueError)) return -1;
        PyErr_Clear();
        return 0;
    }
    *value = PyFloat_AS_DOUBLE(number);
    Py_DECREF(number);
    return 1;
}

/* parse_float: float() of the token without its thousands separators; -1 without an exception: memory ran out. */
static int
parse_float(const uint8_t *token, Py_ssize_t length, double *value, int interpreter)
{
    /* A plain decimal first: it holds no comma, and most values are one (no search for a comma in each). */
    if (simple_decimal(token, token + length, value)) return 1;
    if (length == 0 || memchr(token, ',', (size_t)length) == NULL) {
        return parse_unusual_number(token, length, value, interpreter);
    }
    uint8_t *text = PyMem_RawMalloc((size_t)length);
    if (text == NULL) return -1;
    Py_ssize_t kept = 0;
    for (Py_ssize_t i = 0; i < length; i++) {
        if (token[i] != ',') text[kept++] = token[i];
    }
    int parsed = simple_decimal(text, text + kept, value) ? 1 : parse_unusual_number(text, kept, value, interpreter);
    PyMem_RawFree(text);
    return parsed;
}

/* Byte classes of the number and unit grammars (native/numbers.py's regular expressions). */
enum { NUMBER_BYTE = 1, SEPARATED_NUMBER_BYTE = 2, UNIT_BYTE = 4 };

static uint8_t
byte_class(uint8_t byte)
{
    if ((byte >= '0' && byte <= '9') || byte == '-' || byte == '+' || byte == '.' || byte == 'e' || byte == 'E') {
        return NUMBER_BYTE | SEPARATED_NUMBER_BYTE | ((byte == 'e' || byte == 'E') ? UNIT_BYTE : 0);
    }
    if (byte == ',') return SEPARATED_NUMBER_BYTE;
    if ((byte >= 'A' && byte <= 'Z') || (byte >= 'a' && byte <= 'z') || byte == '/' || byte == '%') return UNIT_BYTE;
    return 0;
}

/* How many bytes from ``token`` on are of ``class`` (byte_class). */
static Py_ssize_t
span_of(const uint8_t *token, Py_ssize_t length, uint8_t class)
{
    Py_ssize_t span = 0;
    while (span < length && (byte_class(token[span]) & class)) span++;
    return span;
}

static int
starts_with_nocase(const uint8_t *token, Py_ssize_t length, const char *prefix)
{
    Py_ssize_t size = (Py_ssize_t)strlen(prefix);
    if (length < size) return 0;
    for (Py_ssize_t i = 0; i < size; i++) {
        uint8_t byte = token[i];
        if (byte >= 'A' && byte <= 'Z') byte += 'a' - 'A';
        if (byte != (uint8_t)prefix[i]) return 0;
    }
    return 1;
}

/* The number part of ``([-+0-9.eE...]+|nan|inf)``: its length, 0 when none. */
static Py_ssize_t
number_part(const uint8_t *token, Py_ssize_t length, uint8_t accepted)
{
    Py_ssize_t span = span_of(token, length, accepted);
    if (span) return span;
    return starts_with_nocase(token, length, "nan") || starts_with_nocase(token, length, "inf") ? 3 : 0;
}

static const struct {
    const char *name;
    double per_second;
} DURATION_UNITS[] = {{"ms", 1e3}, {"us", 1e6}, {"s", 1.0}, {"sec", 1.0}, {"seconds", 1.0}};

/* Units of a second in the duration unit ``unit`` (any case); 0 when it is not one. */
static double
duration_unit(const uint8_t *unit, Py_ssize_t length)
{
    for (size_t i = 0; i < sizeof(DURATION_UNITS) / sizeof(DURATION_UNITS[0]); i++) {
        if ((Py_ssize_t)strlen(DURATION_UNITS[i].name) == length && starts_with_nocase(unit, length, DURATION_UNITS[i].name)) {
            return DURATION_UNITS[i].per_second;
        }
    }
    return 0;
}

/* parse_duration_seconds(token, default_unit): as parse_number. */
static int
parse_duration(const uint8_t *token, Py_ssize_t length, double bare_per_second, double *seconds, int interpreter)
{
    Py_ssize_t number = number_part(token, length, NUMBER_BYTE);
    if (number == 0) return 0;
    const uint8_t *unit = skip_spaces(token + number, token + length);
    Py_ssize_t unit_length = token + length - unit;
    double per_second = unit_length ? duration_unit(unit, unit_length) : bare_per_second;
    if (per_second == 0) return 0;
    int parsed = parse_float(token, number, seconds, interpreter);
    if (parsed == 1) *seconds /= per_second;
    return parsed;
}

/* parse_number_with_unit(token): 1 with *value and *unit (length 0: none), 0 (None), -1 (error). */
static int
parse_with_unit(const uint8_t *token, Py_ssize_t length, double *value, Text *unit, int interpreter)
{
    Py_ssize_t number = number_part(token, length, SEPARATED_NUMBER_BYTE);
    const uint8_t *rest = skip_spaces(token + number, token + length);
    Py_ssize_t rest_length = token + length - rest;
    if (number == 0 || span_of(rest, rest_length, UNIT_BYTE) != rest_length) {
        return 0;
    }
    *unit = (Text){rest, rest_length};
    return parse_float(token, number, value, interpreter);
}

/* ------------------------------------------------------------------------------------------ */
/* The field table                                                                            */

static int
text_of(PyObject *object, Text *text)
{
    if (!PyBytes_Check(object)) {
        PyErr_SetString(PyExc_TypeError, "a field table holds bytes");
        return -1;
    }
    *text = (Text){(const uint8_t *)PyBytes_AS_STRING(object), PyBytes_GET_SIZE(object)};
    return 0;
}

static int
byte_of(PyObject *object, uint8_t *byte)
{
    Text text;
    if (text_of(object, &text) < 0) return -1;
    if (text.length != 1 || text.at[0] >= 0x80 || is_space(text.at[0]) || is_name(text.at[0])) {
        PyErr_SetString(PyExc_ValueError, "a field table's punctuation is one ASCII byte each, neither a space nor a name byte");
        return -1;
    }
    *byte = text.at[0];
    return 0;
}

static int
int_of(PyObject *object, int *value)
{
    long number = PyLong_AsLong(object);
    if (number == -1 && PyErr_Occurred()) return -1;
    if (number < INT32_MIN || number > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "a field table's numbers are small");
        return -1;
    }
    *value = (int)number;
    return 0;
}

static PyObject *
tuple_of(PyObject *object, Py_ssize_t size)
{
    if (!PyTuple_Check(object) || (size >= 0 && PyTuple_GET_SIZE(object) != size)) {
        PyErr_Format(PyExc_TypeError, "a field table is made of tuples (%zd items)", size);
        return NULL;
    }
    return object;
}

static int
field_of(PyObject *object, FieldSpec *field)
{
    PyObject *entry = tuple_of(object, -1);
    if (entry != NULL && PyTuple_GET_SIZE(entry) != 5 && PyTuple_GET_SIZE(entry) != 6) {
        PyErr_SetString(PyExc_ValueError, "a field is five or six items");
        return -1;
    }
    if (entry == NULL || text_of(PyTuple_GET_ITEM(entry, 0), &field->name) < 0
        || int_of(PyTuple_GET_ITEM(entry, 1), &field->kind) < 0 || int_of(PyTuple_GET_ITEM(entry, 2), &field->series) < 0
        || text_of(PyTuple_GET_ITEM(entry, 3), &field->absent) < 0) {
        return -1;
    }
    if (field->kind < KIND_FLOAT || field->kind > KIND_RECIPROCAL) {
        PyErr_Format(PyExc_ValueError, "unknown field kind %d", field->kind);
        return -1;
    }
    Text unit;
    if (text_of(PyTuple_GET_ITEM(entry, 4), &unit) < 0) return -1;
    field->bare_per_second = unit.length ? duration_unit(unit.at, unit.length) : 1.0;
    if (field->kind == KIND_DURATION && field->bare_per_second == 0) {
        PyErr_SetString(PyExc_ValueError, "unknown duration unit");
        return -1;
    }
    if (PyTuple_GET_SIZE(entry) == 6) {
        int column;
        if (int_of(PyTuple_GET_ITEM(entry, 5), &column) < 0) return -1;
        field->column = column;
    }
    return 0;
}

/* A byte of the table's own punctuation: ASCII, neither a space nor a name byte, none of its separators. */
static int
is_punctuation(const Table *table, uint8_t byte)
{
    return byte < 0x80 && !is_space(byte) && !is_name(byte) && !table->separator[byte] && byte != table->name_separator;
}

/* A tuple of at most ``most`` non-empty names into ``names``; -1 on error. */
static int
read_names(PyObject *object, Text *names, Py_ssize_t *count, Py_ssize_t most, const char *what)
{
    PyObject *tuple = tuple_of(object, -1);
    if (tuple == NULL) return -1;
    *count = PyTuple_GET_SIZE(tuple);
    if (*count > most) {
        PyErr_Format(PyExc_ValueError, "at most %zd names %s", most, what);
        return -1;
    }
    for (Py_ssize_t i = 0; i < *count; i++) {
        if (text_of(PyTuple_GET_ITEM(tuple, i), &names[i]) < 0) return -1;
        if (names[i].length == 0) {
            PyErr_Format(PyExc_ValueError, "names %s are names", what);
            return -1;
        }
    }
    return 0;
}

/* Brackets: none, or two bytes of punctuation. */
static int
read_brackets(const Table *table, PyObject *object, uint8_t *open, uint8_t *shut)
{
    Text brackets;
    if (text_of(object, &brackets) < 0) return -1;
    if ((brackets.length != 0 && brackets.length != 2)
        || (brackets.length && (!is_punctuation(table, brackets.at[0]) || !is_punctuation(table, brackets.at[1])))) {
        PyErr_SetString(PyExc_ValueError, "brackets are two bytes of punctuation, or none");
        return -1;
    }
    *open = brackets.length ? brackets.at[0] : 0;
    *shut = brackets.length ? brackets.at[1] : 0;
    return 0;
}

static Py_ssize_t normalise_name(const uint8_t *at, const uint8_t *end, uint8_t *out);

/* A name of at most MAX_NAME bytes that normalise_name leaves as it is (the empty one too). */
static int
is_normalised(Text name)
{
    uint8_t normalised[MAX_NAME];
    return name.length <= MAX_NAME && normalise_name(name.at, name.at + name.length, normalised) == name.length
           && memcmp(normalised, name.at, (size_t)name.length) == 0;
}

/* The pairs grammar's five further options (outer, outer_names, seconds, words, every_value); -1 on error. */
static int
read_outer_options(PyObject *options, Table *table)
{
    PyObject *names = tuple_of(PyTuple_GET_ITEM(options, 6), -1);
    PyObject *seconds = names ? tuple_of(PyTuple_GET_ITEM(options, 7), -1) : NULL;
    PyObject *words = seconds ? tuple_of(PyTuple_GET_ITEM(options, 8), -1) : NULL;
    if (words == NULL || text_of(PyTuple_GET_ITEM(options, 5), &table->outer) < 0) return -1;
    if ((table->outer.length && (!table->step_open || !is_name_start(table->outer.at[0])))
        || PyTuple_GET_SIZE(names) != (table->outer.length ? 4 : 0)) {
        PyErr_SetString(PyExc_ValueError, "an outer count is a name printed with the step's brackets, with four names "
                                          "(b'': not kept)");
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
        if (text_of(PyTuple_GET_ITEM(names, i), &table->outer_names[i]) < 0) return -1;
    }
    table->second_count = PyTuple_GET_SIZE(seconds);
    table->word_count = PyTuple_GET_SIZE(words);
    if (table->second_count > MAX_RENAMED || table->word_count > MAX_RENAMED) {
        PyErr_Format(PyExc_ValueError, "at most %d seconds and %d words", MAX_RENAMED, MAX_RENAMED);
        return -1;
    }
    for (Py_ssize_t i = 0; i < table->second_count; i++) {
        PyObject *entry = tuple_of(PyTuple_GET_ITEM(seconds, i), 2);
        if (entry == NULL || text_of(PyTuple_GET_ITEM(entry, 0), &table->seconds_from[i]) < 0
            || text_of(PyTuple_GET_ITEM(entry, 1), &table->seconds_to[i]) < 0) {
            return -1;
        }
        if ((!table->value_open && !table->item_open) || !table->seconds_from[i].length
            || !table->seconds_to[i].length || !is_normalised(table->seconds_to[i])) {
            PyErr_SetString(PyExc_ValueError, "a second item needs value or item brackets; its name is a normalised "
                                              "name");
            return -1;
        }
    }
    for (Py_ssize_t i = 0; i < table->word_count; i++) {
        PyObject *entry = tuple_of(PyTuple_GET_ITEM(words, i), 2);
        if (entry == NULL || text_of(PyTuple_GET_ITEM(entry, 0), &table->words[i]) < 0) return -1;
        if (!PyFloat_CheckExact(PyTuple_GET_ITEM(entry, 1))) {
            PyErr_SetString(PyExc_TypeError, "a word's number is a float");
            return -1;
        }
        table->word_numbers[i] = PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(entry, 1));
        if (!table->words[i].length) {
            PyErr_SetString(PyExc_ValueError, "a word is a word");
            return -1;
        }
    }
    return read_names(PyTuple_GET_ITEM(options, 9), table->every_value, &table->every_value_count, MAX_MARKS,
                      "keep every value of");
}

/* The pairs grammar's last three options (escapes, item_brackets, not_after); -1 on error. */
static int
read_last_options(PyObject *options, Table *table)
{
    if (!PyLong_CheckExact(PyTuple_GET_ITEM(options, 10))) {
        PyErr_SetString(PyExc_TypeError, "escapes is an int");
        return -1;
    }
    if (int_of(PyTuple_GET_ITEM(options, 10), &table->escapes) < 0) return -1;
    if (table->escapes != 0 && table->escapes != 1) {
        PyErr_SetString(PyExc_ValueError, "escapes is 0 or 1");
        return -1;
    }
    if (read_brackets(table, PyTuple_GET_ITEM(options, 11), &table->item_open, &table->item_shut) < 0) return -1;
    if (table->item_open && table->item_open == table->value_open) {
        PyErr_SetString(PyExc_ValueError, "item brackets are no value brackets");
        return -1;
    }
    if (read_names(PyTuple_GET_ITEM(options, 12), table->not_after, &table->not_after_count, MAX_MARKS,
                   "before a step's name") < 0) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < table->not_after_count; i++) {
        const Text word = table->not_after[i];
        for (Py_ssize_t at = 0; at < word.length; at++) {
            if (!table->name_byte[word.at[at]] || (at == 0 && !is_name_start(word.at[0]))) {
                PyErr_SetString(PyExc_ValueError, "a word before a step's name is a name");
                return -1;
            }
        }
    }
    return 0;
}

/* The pairs grammar's lead options (lead, lead_name, lead_close); -1 on error. */
static int
read_lead_options(PyObject *options, Table *table)
{
    Text close = {NULL, 0};
    if (text_of(PyTuple_GET_ITEM(options, 13), &table->lead) < 0
        || text_of(PyTuple_GET_ITEM(options, 14), &table->lead_name) < 0
        || text_of(PyTuple_GET_ITEM(options, 15), &close) < 0) {
        return -1;
    }
    const Text lead = table->lead, name = table->lead_name;
    table->lead_close = close.length == 1 ? close.at[0] : 0;
    int lead_ok = lead.length == 0 || (!table->step_open && is_name_start(lead.at[0]));
    for (Py_ssize_t at = 1; at < lead.length; at++) lead_ok = lead_ok && is_name(lead.at[at]);
    if (!lead_ok || (lead.length == 0) != (name.length == 0) || !is_normalised(name)
        || (close.length && (!lead.length || close.length != 1 || !is_punctuation(table, close.at[0])))) {
        PyErr_SetString(PyExc_ValueError, "a lead is a name printed without the step's brackets, with a normalised "
                                          "name and a close of punctuation, no separator");
        return -1;
    }
    return 0;
}

/* The pairs grammar's step counted within a count printed before its fraction (step_count_name, count_step_names);
 * -1 on error. */
static int
read_count_options(PyObject *options, Table *table)
{
    if (text_of(PyTuple_GET_ITEM(options, 16), &table->step_count_name) < 0
        || read_names(PyTuple_GET_ITEM(options, 17), table->count_step_names, &table->count_step_name_count,
                      MAX_STEP_NAMES, "of a step printed after a count") < 0) {
        return -1;
    }
    const Text name = table->step_count_name;
    int names_ok = 1;
    for (Py_ssize_t i = 0; i < table->count_step_name_count; i++) {
        names_ok = names_ok && is_name_start(table->count_step_names[i].at[0]);
    }
    if (!names_ok || (name.length == 0) != (table->count_step_name_count == 0)
        || (name.length && (!table->step_open || table->outer.length)) || !is_normalised(name)) {
        PyErr_SetString(PyExc_ValueError, "a step count is a normalised name, of steps printed with the step's brackets "
                                          "after a count in them, no outer count's");
        return -1;
    }
    return 0;
}

/* Names renamed, ((printed, name, unit), ...) (the pairs grammar's options, the JSON grammar's fourth item); -1 on
 * error. */
static int
read_renamed(PyObject *object, Table *table)
{
    PyObject *renamed = tuple_of(object, -1);
    if (renamed == NULL) return -1;
    table->renamed_count = PyTuple_GET_SIZE(renamed);
    if (table->renamed_count > MAX_RENAMED) {
        PyErr_Format(PyExc_ValueError, "at most %d names are renamed", MAX_RENAMED);
        return -1;
    }
    for (Py_ssize_t i = 0; i < table->renamed_count; i++) {
        PyObject *entry = tuple_of(PyTuple_GET_ITEM(renamed, i), 3);
        if (entry == NULL || text_of(PyTuple_GET_ITEM(entry, 0), &table->renamed_from[i]) < 0
            || text_of(PyTuple_GET_ITEM(entry, 1), &table->renamed_to[i]) < 0
            || text_of(PyTuple_GET_ITEM(entry, 2), &table->renamed_unit[i]) < 0) {
            return -1;
        }
        if (table->renamed_from[i].length == 0 || table->renamed_to[i].length > MAX_NAME) {
            PyErr_SetString(PyExc_ValueError, "a renamed name is a name, its new name at most MAX_NAME bytes");
            return -1;
        }
    }
    return 0;
}

/* The pairs grammar's options (step_brackets, name_bytes, renamed, value_brackets, marks[, outer, outer_names,
 * seconds, words, every_value[, escapes, item_brackets, not_after[, lead, lead_name, lead_close[, step_count_name,
 * count_step_names]]]]); -1 on error. */
static int
read_pairs_options(PyObject *object, Table *table)
{
    PyObject *options = tuple_of(object, -1);
    Text name_bytes;
    if (options != NULL && PyTuple_GET_SIZE(options) != 5 && PyTuple_GET_SIZE(options) != 10
        && PyTuple_GET_SIZE(options) != 13 && PyTuple_GET_SIZE(options) != 16 && PyTuple_GET_SIZE(options) != 18) {
        PyErr_SetString(PyExc_TypeError, "the pairs grammar's options are five, ten, thirteen, sixteen or eighteen items");
        return -1;
    }
    if (options == NULL || read_brackets(table, PyTuple_GET_ITEM(options, 0), &table->step_open, &table->step_shut) < 0
        || text_of(PyTuple_GET_ITEM(options, 1), &name_bytes) < 0 || read_renamed(PyTuple_GET_ITEM(options, 2), table) < 0
        || read_brackets(table, PyTuple_GET_ITEM(options, 3), &table->value_open, &table->value_shut) < 0) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < name_bytes.length; i++) {
        if (!is_punctuation(table, name_bytes.at[i])) {
            PyErr_SetString(PyExc_ValueError, "a name's further bytes are punctuation, no separator");
            return -1;
        }
        table->name_byte[name_bytes.at[i]] = 1;
    }
    if (read_names(PyTuple_GET_ITEM(options, 4), table->marks, &table->mark_count, MAX_MARKS, "mark a record") < 0) return -1;
    /* The item brackets first: the seconds they allow are read with the outer options. */
    if (PyTuple_GET_SIZE(options) >= 13 && read_last_options(options, table) < 0) return -1;
    if (PyTuple_GET_SIZE(options) >= 16 && read_lead_options(options, table) < 0) return -1;
    if (PyTuple_GET_SIZE(options) >= 10 && read_outer_options(options, table) < 0) return -1;
    if (PyTuple_GET_SIZE(options) == 18 && read_count_options(options, table) < 0) return -1;
    table->options = 1;
    return 0;
}

/* The pairs grammar's punctuation and step names (and options); -1 on error. */
static int
read_pairs_table(PyObject *tuple, Table *table)
{
    Text separators, name_separator;
    if (text_of(PyTuple_GET_ITEM(tuple, 2), &separators) < 0 || text_of(PyTuple_GET_ITEM(tuple, 3), &name_separator) < 0) {
        return -1;
    }
    /* ``b": "``: a colon, spaces may follow it */
    table->spaced = name_separator.length == 2 && name_separator.at[1] == ' ';
    PyObject *separator_byte = table->spaced ? PyBytes_FromStringAndSize((const char *)name_separator.at, 1) : NULL;
    int read = byte_of(separator_byte ? separator_byte : PyTuple_GET_ITEM(tuple, 3), &table->name_separator);
    Py_XDECREF(separator_byte);
    if (read < 0) return -1;
    if (memchr(separators.at, table->name_separator, (size_t)separators.length)) { /* none: values end at spaces */
        PyErr_SetString(PyExc_ValueError, "the pairs grammar needs value separators other than its name separator");
        return -1;
    }
    for (Py_ssize_t i = 0; i < separators.length; i++) {
        uint8_t byte = separators.at[i];
        if (byte >= 0x80 || is_space(byte) || is_name(byte)) {
            PyErr_SetString(PyExc_ValueError, "a field table's punctuation is one ASCII byte each, neither a space nor a name byte");
            return -1;
        }
        table->separator[byte] = 1;
    }
    for (int byte = 0; byte < 256; byte++) table->ends[byte] = table->separator[byte] || is_space((uint8_t)byte);
    PyObject *names = tuple_of(PyTuple_GET_ITEM(tuple, 4), -1);
    if (names == NULL) return -1;
    table->step_name_count = PyTuple_GET_SIZE(names);
    if (table->step_name_count == 0 || table->step_name_count > MAX_STEP_NAMES) {
        PyErr_SetString(PyExc_ValueError, "a field table's step names are names");
        return -1;
    }
    for (Py_ssize_t i = 0; i < table->step_name_count; i++) {
        Text *name = &table->step_names[i];
        if (text_of(PyTuple_GET_ITEM(names, i), name) < 0) return -1;
        if (name->length == 0 || !is_name_start(name->at[0])) {
            PyErr_SetString(PyExc_ValueError, "a field table's step names are names");
            return -1;
        }
    }
    for (int byte = 0; byte < 256; byte++) table->name_byte[byte] = is_name((uint8_t)byte);
    table->pairs = 1;
    return PyTuple_GET_SIZE(tuple) == 9 ? read_pairs_options(PyTuple_GET_ITEM(tuple, 8), table) : 0;
}

/* The segments grammar's punctuation, step name and (dropped, counted, step_segment, lead, lead_name, step_close,
 * percent); -1 on error. */
static int
read_segments_table(PyObject *tuple, Table *table)
{
    PyObject *segments = tuple_of(PyTuple_GET_ITEM(tuple, 8), 7);
    Text close;
    if (segments == NULL || text_of(PyTuple_GET_ITEM(segments, 5), &close) < 0
        || text_of(PyTuple_GET_ITEM(segments, 6), &table->percent) < 0
        || (close.length && byte_of(PyTuple_GET_ITEM(segments, 5), &table->step_close) < 0)) {
        return -1;
    }
    if (table->percent.length > MAX_PERCENT) {
        PyErr_Format(PyExc_ValueError, "a percent suffix is at most %d bytes", MAX_PERCENT);
        return -1;
    }
    if (byte_of(PyTuple_GET_ITEM(tuple, 2), &table->pair_separator) < 0
        || byte_of(PyTuple_GET_ITEM(tuple, 3), &table->name_separator) < 0
        || text_of(PyTuple_GET_ITEM(tuple, 4), &table->step_name) < 0
        || text_of(PyTuple_GET_ITEM(segments, 0), &table->dropped) < 0
        || text_of(PyTuple_GET_ITEM(segments, 1), &table->counted) < 0
        || text_of(PyTuple_GET_ITEM(segments, 2), &table->step_segment) < 0
        || text_of(PyTuple_GET_ITEM(segments, 3), &table->lead) < 0
        || text_of(PyTuple_GET_ITEM(segments, 4), &table->lead_name) < 0) {
        return -1;
    }
    if (table->pair_separator == table->name_separator) {
        PyErr_SetString(PyExc_ValueError, "the pairs grammar needs value separators other than its name separator");
        return -1;
    }
    if (table->step_name.length == 0 || !is_name_start(table->step_name.at[0])) {
        PyErr_SetString(PyExc_ValueError, "a field table's step names are names");
        return -1;
    }
    if (table->required != -1) {
        PyErr_SetString(PyExc_ValueError, "the segments grammar requires no field");
        return -1;
    }
    table->segments = 1;
    return 0;
}

/* The JSON grammar's names renamed: ((normalised key, name, b""), ...), keys read as other names; -1 on error. */
static int
read_json_renamed(PyObject *object, Table *table)
{
    if (read_renamed(object, table) < 0) return -1;
    for (Py_ssize_t i = 0; i < table->renamed_count; i++) {
        for (int side = 0; side < 2; side++) {
            const Text name = side ? table->renamed_to[i] : table->renamed_from[i];
            if (name.length == 0 || table->renamed_unit[i].length || !is_normalised(name)) {
                PyErr_SetString(PyExc_ValueError, "a JSON key is renamed from a normalised name to another, no unit");
                return -1;
            }
        }
    }
    return 0;
}

/* The JSON grammar's step names and (total_names, dropped, declines[, (renamed, marks)]); -1 on error. */
static int
read_json_table(PyObject *tuple, Table *table)
{
    PyObject *json = tuple_of(PyTuple_GET_ITEM(tuple, 8), -1);
    Text separator, name_separator;
    if (json != NULL && PyTuple_GET_SIZE(json) != 3 && PyTuple_GET_SIZE(json) != 4) {
        PyErr_SetString(PyExc_TypeError, "the JSON grammar is three or four items");
        return -1;
    }
    PyObject *further = json != NULL && PyTuple_GET_SIZE(json) == 4 ? tuple_of(PyTuple_GET_ITEM(json, 3), 2) : NULL;
    if (json != NULL && PyTuple_GET_SIZE(json) == 4 && further == NULL) return -1;
    if (json == NULL || text_of(PyTuple_GET_ITEM(tuple, 2), &separator) < 0
        || text_of(PyTuple_GET_ITEM(tuple, 3), &name_separator) < 0
        || read_names(PyTuple_GET_ITEM(tuple, 4), table->step_names, &table->step_name_count, MAX_STEP_NAMES,
                      "give the step") < 0
        || read_names(PyTuple_GET_ITEM(json, 0), table->total_names, &table->total_name_count, MAX_STEP_NAMES,
                      "give the total") < 0
        || text_of(PyTuple_GET_ITEM(json, 1), &table->dropped) < 0
        || read_names(PyTuple_GET_ITEM(json, 2), table->declines, &table->decline_count, MAX_MARKS,
                      "decline a line") < 0
        || (further && (read_json_renamed(PyTuple_GET_ITEM(further, 0), table) < 0
                        || read_names(PyTuple_GET_ITEM(further, 1), table->marks, &table->mark_count, MAX_MARKS,
                                      "mark a record") < 0))) {
        return -1;
    }
    if (separator.length != 1 || separator.at[0] != ',' || name_separator.length != 1 || name_separator.at[0] != ':') {
        PyErr_SetString(PyExc_ValueError, "the JSON grammar's punctuation is JSON's, b\",\" and b\":\"");
        return -1;
    }
    if (table->step_name_count == 0) {
        PyErr_SetString(PyExc_ValueError, "a field table's step names are names");
        return -1;
    }
    table->json = 1;
    return 0;
}

/* The first field entry of ``column``; -1 when none sets it. */
static Py_ssize_t
first_of_column(const Table *table, Py_ssize_t column)
{
    for (Py_ssize_t i = 0; i < table->count; i++) {
        if (table->fields[i].column == column) return i;
    }
    return -1;
}

/* The columns: numbered from 0 one after the other, the entries of one agreeing on kind, series, absent and unit. */
static int
read_columns(Table *table)
{
    table->columns = 0;
    for (Py_ssize_t i = 0; i < table->count; i++) {
        const FieldSpec *field = &table->fields[i];
        if (field->column < 0 || field->column >= table->count) goto bad;
        if (field->column >= table->columns) table->columns = field->column + 1;
        const FieldSpec *first = &table->fields[first_of_column(table, field->column)];
        if (first->kind != field->kind || first->series != field->series || !same_text(first->absent.at, first->absent.length, field->absent)
            || first->bare_per_second != field->bare_per_second) {
            PyErr_SetString(PyExc_ValueError, "the fields of one column agree on kind, series, absent and unit");
            return -1;
        }
    }
    for (Py_ssize_t column = 0; column < table->columns; column++) {
        if (first_of_column(table, column) < 0) goto bad;
    }
    if (table->required >= -1 && table->required < table->columns) return 0;
bad:
    PyErr_SetString(PyExc_ValueError, "a field table's columns are numbered from 0, one after the other");
    return -1;
}

/* The table tuple into ``table`` (its texts point into the tuple's bytes); -1 on error. */
static int
read_table(PyObject *object, Table *table)
{
    PyObject *tuple = tuple_of(object, -1);
    if (tuple == NULL) return -1;
    Py_ssize_t size = PyTuple_GET_SIZE(tuple);
    if (size < 7 || size > 9) {
        PyErr_SetString(PyExc_ValueError, "a field table has seven to nine items");
        return -1;
    }
    Text opener, closer;
    if (text_of(PyTuple_GET_ITEM(tuple, 0), &opener) < 0 || text_of(PyTuple_GET_ITEM(tuple, 1), &closer) < 0) return -1;
    table->required = -1;
    if (size >= 8) {
        int required;
        if (int_of(PyTuple_GET_ITEM(tuple, 7), &required) < 0) return -1;
        table->required = required;
    }
    if (size == 9 && (opener.length || closer.length)) {
        PyErr_SetString(PyExc_ValueError, "a grammar of a ninth item (segments, the pairs grammar's options, JSON) has "
                                          "no opener and no closer");
        return -1;
    }
    PyObject *ninth = size == 9 ? PyTuple_GET_ITEM(tuple, 8) : NULL;
    if (ninth && PyTuple_Check(ninth) && PyTuple_GET_SIZE(ninth) == 7) { /* else the pairs grammar's options */
        if (read_segments_table(tuple, table) < 0) return -1;
    }
    else if (ninth && PyTuple_Check(ninth) && (PyTuple_GET_SIZE(ninth) == 3 || PyTuple_GET_SIZE(ninth) == 4)) {
        if (read_json_table(tuple, table) < 0) return -1;
    }
    else if (opener.length == 0 && closer.length == 0) {
        if (read_pairs_table(tuple, table) < 0) return -1;
    }
    else if (byte_of(PyTuple_GET_ITEM(tuple, 0), &table->opener) < 0
        || byte_of(PyTuple_GET_ITEM(tuple, 1), &table->closer) < 0
        || byte_of(PyTuple_GET_ITEM(tuple, 2), &table->pair_separator) < 0
        || byte_of(PyTuple_GET_ITEM(tuple, 3), &table->name_separator) < 0
        || text_of(PyTuple_GET_ITEM(tuple, 4), &table->step_name) < 0) {
        return -1;
    }
    PyObject *tag = tuple_of(PyTuple_GET_ITEM(tuple, 5), 2);
    PyObject *fields = tag ? tuple_of(PyTuple_GET_ITEM(tuple, 6), -1) : NULL;
    if (fields == NULL || text_of(PyTuple_GET_ITEM(tag, 0), &table->tag_open) < 0
        || text_of(PyTuple_GET_ITEM(tag, 1), &table->tag_close) < 0) {
        return -1;
    }
    table->count = PyTuple_GET_SIZE(fields);
    table->fields = PyMem_Calloc((size_t)table->count + 1, sizeof(FieldSpec));
    if (table->fields == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < table->count; i++) {
        table->fields[i].column = i;
        if (field_of(PyTuple_GET_ITEM(fields, i), &table->fields[i]) < 0) return -1;
        for (Py_ssize_t before = 0; before < i; before++) {
            if (same_text(table->fields[i].name.at, table->fields[i].name.length, table->fields[before].name)) {
                PyErr_SetString(PyExc_ValueError, "a field table names each field once");
                return -1;
            }
        }
        if (is_one_of(table->fields[i].name, table->seconds_to, table->second_count)) {
            PyErr_SetString(PyExc_ValueError, "a second item's name is no field's");
            return -1;
        }
    }
    /* A plain decimal's bytes are the number grammar's (byte_class). */
    table->numbers_ahead = table->pairs && !(byte_class(table->value_open) & NUMBER_BYTE)
                           && !(byte_class(table->item_shut) & NUMBER_BYTE);
    for (int byte = 0; byte < 256; byte++) {
        if (table->ends[byte] && (byte_class((uint8_t)byte) & NUMBER_BYTE)) table->numbers_ahead = 0;
    }
    return read_columns(table);
}

static Py_ssize_t
field_named(const Table *table, const uint8_t *name, Py_ssize_t length)
{
    for (Py_ssize_t i = 0; i < table->count; i++) {
        if (same_text(name, length, table->fields[i].name)) return i;
    }
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* A run of lines                                                                             */

/* A value a run keeps only the latest of is read once, when the read ends (settle_run), not on every line: a plain
 * decimal (``plain_decimal``, which parse_float always reads) is kept as its bytes until then. */
typedef struct {
    const uint8_t *at; /* NULL: none waiting */
    Py_ssize_t length;
} Unread;

typedef struct {
    int has;
    double value;
    Text unit; /* length 0: none */
    Unread unread; /* the value's bytes, not read yet (value unset) */
} Slot;        /* a table field, for one line */

/* Bytes copied out of the data: a run outlives the block it was read from. */
typedef struct {
    uint8_t *at;
    Py_ssize_t length, capacity;
} OwnedText;

typedef struct {
    int series; /* every value is kept (its fields' flag) */
    int has;
    double value;
    OwnedText unit; /* of the latest line whose value had one */
    Unread unread; /* not a series: the latest value's bytes, read when the read ends */
    Py_ssize_t *rows; /* series: the line of each value */
    double *values;
    Py_ssize_t count, capacity;
} Column;

typedef struct {
    OwnedText name;
    double value;
    Py_ssize_t lines, first_line, position, last_line;
    int every; /* its name holds one of the table's every_value parts: each line's value is kept */
    Unread unread; /* not every: the latest value's bytes, read when the read ends */
    Py_ssize_t *rows; /* every: the line of each value */
    double *values;
    Py_ssize_t count, capacity;
} Named;

#define SHAPE_BYTES 256

/* The segments and JSON grammars: a name as the line before printed it at one place, and what it is. Lines print
 * the same names in the same order: a name found again at its place needs no normalising and no lookup. */
#define MAX_HEAD (2 * MAX_NAME)

typedef struct {
    uint8_t printed[MAX_NAME], name[MAX_NAME];
    Py_ssize_t printed_length, name_length;
    uint8_t head[MAX_HEAD]; /* the segment's bytes before its name separator, spaces and all (0 long: none) */
    Py_ssize_t head_length;
    Py_ssize_t field;       /* its field entry, -1: a named value */
    double bare_per_second; /* a DURATION's bare unit the name holds, 0: the field's */
    Py_ssize_t named;       /* where the run's named values last held it, -1: not yet */
    int is_step, is_counted; /* the table's step segment (JSON: a step name), its counted named value */
    int is_total, declines;  /* JSON: a total's name, a name the run leaves to the per-line reader */
} SegmentName;

/* The pairs grammar: the names the last line read printed, in order, each after the bytes between it and the pair
 * (or the line's pairs' start) before it, its joint. A line printing the same names after the same joints holds the
 * same pairs, which then need no lookup and no check (read_pairs_line). */
typedef struct {
    Py_ssize_t count, step_pair; /* count 0: none yet */
    Py_ssize_t lengths[MAX_PAIRS], joints[MAX_PAIRS], fields[MAX_PAIRS];
    Py_ssize_t named[MAX_PAIRS]; /* where the run's named values last held each named value (note_named's hint) */
    uint8_t names[SHAPE_BYTES];  /* each joint and its name */
} Shape;

typedef struct {
    const Table *table;
    int interpreter; /* its numbers may be read by float()'s own function (not on StepsAhead's thread) */
    /* The shapes of the last lines of other shapes (a log may print two kinds of lines in turn: MindFormers' record,
     * then its weight norm), the one to keep the next shape in. */
    Shape shapes[2];
    int next_shape;
    long long *steps;
    Py_ssize_t count, capacity;
    int has_total; /* a line printed its total (the pairs grammar's may not) */
    long long total;
    Column *columns;
    Slot *slots; /* the line being read */
    Named *named;
    Py_ssize_t named_count, named_capacity;
    Py_ssize_t line_named; /* distinct named values of the line being read */
    SegmentName *segment_names; /* the segments and JSON grammars: the names of the last line read, by their place */
    Py_ssize_t checked; /* JSON: the first names of segment_names, checked one against the other */
    uint8_t *unescaped; /* the pairs grammar's escapes: the line being read without them */
    Py_ssize_t unescaped_capacity;
    int line_copied; /* the line being read is in ``unescaped`` */
} Run;

/* A run's memory is the raw allocator's and a failure raises nothing: a run may be read on a thread that does not
 * hold the interpreter (StepsAhead); StepReader.read raises MemoryError. */
static int
own_text(OwnedText *owned, Text text)
{
    if (text.length > owned->capacity) {
        uint8_t *grown = PyMem_RawRealloc(owned->at, (size_t)text.length);
        if (grown == NULL) return -1;
        owned->at = grown;
        owned->capacity = text.length;
    }
    if (text.length) memcpy(owned->at, text.at, (size_t)text.length); /* an empty name owns no bytes */
    owned->length = text.length;
    return 0;
}

static Text
text_of_owned(const OwnedText *owned)
{
    return (Text){owned->at, owned->length};
}

/* Room for ``wanted`` items in an array of ``size``-byte items; -1 when none (nothing raised: own_text). */
static int
reserve_items(void **array, Py_ssize_t *capacity, Py_ssize_t wanted, size_t size)
{
    if (wanted <= *capacity) return 0;
    void *grown = PyMem_RawRealloc(*array, (size_t)wanted * size);
    if (grown == NULL) return -1;
    *array = grown;
    *capacity = wanted;
    return 0;
}

/* Room for one more item: the array's room doubled when it is full. */
static int
grow(void **array, Py_ssize_t *capacity, Py_ssize_t count, size_t size)
{
    return count < *capacity ? 0 : reserve_items(array, capacity, *capacity ? 2 * *capacity : 16, size);
}

/* Room for ``lines`` more lines in a run's steps and series columns at once (StepsAhead knows how many a stream
 * holds): none grown line by line. A column's rows and values share its capacity, as commit grows them. */
static int
reserve_lines(Run *run, Py_ssize_t lines)
{
    if (reserve_items((void **)&run->steps, &run->capacity, run->count + lines, sizeof(long long)) < 0) return -1;
    for (Py_ssize_t i = 0; i < run->table->columns; i++) {
        Column *column = &run->columns[i];
        Py_ssize_t capacity = column->capacity, wanted = column->count + lines;
        if (column->series
            && (reserve_items((void **)&column->rows, &capacity, wanted, sizeof(Py_ssize_t)) < 0
                || reserve_items((void **)&column->values, &column->capacity, wanted, sizeof(double)) < 0)) {
            return -1;
        }
    }
    return 0;
}

/* A named value kept under a name holding one of the table's every_value parts. */
static int
keeps_every_value(const Table *table, const uint8_t *name, Py_ssize_t length)
{
    for (Py_ssize_t i = 0; i < table->every_value_count; i++) {
        if (find_literal(name, length, table->every_value[i].at, table->every_value[i].length)) return 1;
    }
    return 0;
}

/* The line's value of a named value that keeps every value: one a line (a line printing it twice, its last). */
static int
keep_named_value(Named *named, Py_ssize_t line, double value)
{
    if (named->count && named->rows[named->count - 1] == line) {
        named->values[named->count - 1] = value;
        return 0;
    }
    Py_ssize_t capacity = named->capacity;
    if (grow((void **)&named->rows, &capacity, named->count, sizeof(Py_ssize_t)) < 0
        || grow((void **)&named->values, &named->capacity, named->count, sizeof(double)) < 0) {
        return -1;
    }
    named->rows[named->count] = line;
    named->values[named->count++] = value;
    return 0;
}

/* A named value the run holds, printed by the line being read. */
static void
noted_again(Run *run, Named *named)
{
    if (named->last_line == run->count) return;
    named->last_line = run->count;
    named->lines++;
    run->line_named++;
}

/* Where the run's named values hold the name when it is at ``hint`` (or NULL), else -1. */
static Py_ssize_t
at_hint(const Run *run, const uint8_t *name, Py_ssize_t length, const Py_ssize_t *hint)
{
    return hint && *hint >= 0 && *hint < run->named_count
           && same_text(name, length, text_of_owned(&run->named[*hint].name)) ? *hint : -1;
}

/* ``hint`` (or NULL): where the run's named values held the name when last asked, set to where they hold it. */
static int
note_named(Run *run, const uint8_t *name, Py_ssize_t length, double value, Py_ssize_t *hint)
{
    Py_ssize_t line = run->count;
    Py_ssize_t at = at_hint(run, name, length, hint);
    for (Py_ssize_t i = 0; at < 0 && i < run->named_count; i++) {
        if (same_text(name, length, text_of_owned(&run->named[i].name))) at = i;
    }
    if (at >= 0) {
        Named *named = &run->named[at];
        named->value = value;
        named->unread = (Unread){NULL, 0};
        noted_again(run, named);
        if (hint) *hint = at;
        return named->every ? keep_named_value(named, line, value) : 0;
    }
    if (grow((void **)&run->named, &run->named_capacity, run->named_count, sizeof(Named)) < 0) return -1;
    Named *added = &run->named[run->named_count];
    *added = (Named){{NULL, 0, 0}, value, 1, line, run->line_named, line,
                     keeps_every_value(run->table, name, length), {NULL, 0}, NULL, NULL, 0, 0};
    if (hint) *hint = run->named_count;
    if (own_text(&added->name, (Text){name, length}) < 0) return -1;
    run->named_count++;
    run->line_named++;
    return added->every ? keep_named_value(added, line, value) : 0;
}

/* A value apply_pair keeps as its bytes when it is a plain decimal (Unread), read when the read ends: a field of
 * numbers whose column keeps only its latest, a named value (at ``named_hint``) whose latest only is kept; not on a
 * line copied to the run's buffer (its bytes are gone with the next line). */
static int
may_wait(const Run *run, Py_ssize_t field, Py_ssize_t named_hint)
{
    if (run->line_copied) return 0;
    if (field >= 0) {
        const FieldSpec *spec = &run->table->fields[field];
        return spec->kind == KIND_FLOAT && !run->columns[spec->column].series;
    }
    return named_hint >= 0 && named_hint < run->named_count && !run->named[named_hint].every;
}

/* One pair of the record, ``index`` its name's field entry (-1: a named value): 0, or -1 on error. */
static int
apply_pair(Run *run, Py_ssize_t index, const uint8_t *name, Py_ssize_t name_length, const uint8_t *raw,
           Py_ssize_t raw_length, double bare_per_second, Py_ssize_t *named_hint)
{
    double value = 0;
    int parsed;
    if (index < 0) {
        /* The name at its hint's place: a plain decimal waits to be read (settle_run). */
        Py_ssize_t at = at_hint(run, name, name_length, named_hint);
        if (at >= 0 && may_wait(run, -1, at) && plain_decimal(raw, raw + raw_length)) {
            Named *known = &run->named[at];
            known->unread = (Unread){raw, raw_length};
            noted_again(run, known);
            return 0;
        }
        parsed = parse_float(raw, raw_length, &value, run->interpreter);
        return parsed <= 0 ? parsed : note_named(run, name, name_length, value, named_hint);
    }
    const FieldSpec *field = &run->table->fields[index];
    Slot *slot = &run->slots[field->column];
    if (field->absent.length && same_text(raw, raw_length, field->absent)) return 0; /* not obtained */
    if (field->kind == KIND_NUMBER_WITH_UNIT) {
        Text unit;
        parsed = parse_with_unit(raw, raw_length, &value, &unit, run->interpreter);
        if (parsed == 1) *slot = (Slot){1, value, unit};
        return parsed < 0 ? parsed : 0;
    }
    if (may_wait(run, index, -1) && plain_decimal(raw, raw + raw_length)) {
        *slot = (Slot){1, 0, {NULL, 0}, {raw, raw_length}}; /* read when the read ends (settle_run) */
        return 0;
    }
    parsed = field->kind == KIND_DURATION ? parse_duration(raw, raw_length, bare_per_second ? bare_per_second
                                                                            : field->bare_per_second, &value,
                                                         run->interpreter)
                                          : parse_float(raw, raw_length, &value, run->interpreter);
    if (parsed < 0) return parsed;
    if (field->kind == KIND_RECIPROCAL && parsed == 1) { /* a rate: its period, none for 0 */
        parsed = value != 0;
        value = parsed ? 1.0 / value : 0;
    }
    *slot = (Slot){parsed, value, {NULL, 0}};
    return 0;
}

/* The pairs of a record body: 0, or -1 on error. */
static int
read_pairs(Run *run, const uint8_t *at, const uint8_t *end)
{
    const Table *table = run->table;
    while (at < end) {
        if (!is_name_start(*at)) {
            at++;
            continue;
        }
        const uint8_t *name_end = at;
        while (name_end < end && is_name(*name_end)) name_end++;
        const uint8_t *separator = skip_spaces(name_end, end);
        if (separator == end || *separator != table->name_separator) {
            at++;
            continue;
        }
        const uint8_t *value = skip_spaces(separator + 1, end);
        const uint8_t *value_end = value;
        if (value == end || (*value == table->pair_separator && !is_thousands_separator(value, end))) {
            if (value == separator + 1) { /* a value needs a byte: no pair here */
                at++;
                continue;
            }
            /* The spaces after the separator give one back: the value is blank. */
        } else {
            value_end = value_end_of(table, value, end);
        }
        const uint8_t *stripped = value_end;
        while (stripped > value && is_space(stripped[-1])) stripped--;
        Py_ssize_t index = field_named(table, at, name_end - at);
        int applied = apply_pair(run, index, at, name_end - at, value, stripped - value, 0, NULL);
        if (applied < 0) return applied;
        at = value_end;
    }
    return 0;
}

/* The record at the opener ``at``: 1 (found), 0 (none here), 2 (found, a number too long). */
static int
match_record(const Table *table, const uint8_t *at, const uint8_t *end, long long *step, long long *total,
             const uint8_t **body, const uint8_t **body_end)
{
    int too_long = 0;
    at = skip_spaces(at + 1, end);
    if (!expect(&at, end, table->step_name) || !expect_byte(&at, end, table->name_separator)) return 0;
    at = skip_spaces(at, end);
    if (!expect_byte(&at, end, '[')) return 0;
    at = skip_spaces(at, end);
    if (!read_digits(&at, end, step, &too_long)) return 0;
    at = skip_spaces(at, end);
    if (!expect_byte(&at, end, '/')) return 0;
    at = skip_spaces(at, end);
    if (!read_digits(&at, end, total, &too_long)) return 0;
    at = skip_spaces(at, end);
    if (!expect_byte(&at, end, ']')) return 0;
    at = skip_spaces(at, end);
    if (!expect_byte(&at, end, table->pair_separator)) return 0;
    /* The body runs to the first closer, with no opener before it. */
    const uint8_t *closer = memchr(at, table->closer, (size_t)(end - at));
    if (closer == NULL || memchr(at, table->opener, (size_t)(closer - at)) != NULL) return 0;
    *body = at;
    *body_end = closer;
    return too_long ? 2 : 1;
}

/* The line's record into the run: what it set, its step, the latest of every field. */
static int
commit(Run *run, long long step, int has_total, long long total)
{
    if (grow((void **)&run->steps, &run->capacity, run->count, sizeof(long long)) < 0) return -1;
    Py_ssize_t line = run->count;
    run->steps[run->count++] = step;
    if (has_total) {
        run->has_total = 1;
        run->total = total;
    }
    for (Py_ssize_t i = 0; i < run->table->columns; i++) {
        const Slot *slot = &run->slots[i];
        Column *column = &run->columns[i];
        if (!slot->has) continue;
        column->has = 1;
        column->value = slot->value;
        column->unread = slot->unread;
        if (slot->unit.length && own_text(&column->unit, slot->unit) < 0) return -1;
        if (!column->series) continue;
        Py_ssize_t capacity = column->capacity;
        if (grow((void **)&column->rows, &capacity, column->count, sizeof(Py_ssize_t)) < 0
            || grow((void **)&column->values, &column->capacity, column->count, sizeof(double)) < 0) {
            return -1;
        }
        column->rows[column->count] = line;
        column->values[column->count++] = slot->value;
    }
    return 0;
}

/* The pairs grammar: a byte that ends a value (a space, a separator but a thousands comma). */
static int
ends_value(const Table *table, const uint8_t *at, const uint8_t *end)
{
    return table->ends[*at] && !is_thousands_separator(at, end); /* a comma is no space */
}

typedef struct {
    const uint8_t *name, *value;
    Py_ssize_t name_length, value_length;
    Py_ssize_t field; /* its field entry, -1: a named value */
    int is_number;    /* the value is a plain decimal, ``number`` (shaped_pairs) */
    double number;
} Pair;

/* ``digits[/digits]`` filling the whole value: 1, 0 (not that), 2 (a number too long). */
static int
read_step_value(const uint8_t *at, const uint8_t *end, long long *step, int *has_total, long long *total)
{
    int too_long = 0;
    if (!read_digits(&at, end, step, &too_long)) return 0;
    *has_total = 0;
    if (at < end && *at == '/') {
        at++;
        if (!read_digits(&at, end, total, &too_long)) return 0;
        *has_total = 1;
    }
    if (at != end) return 0;
    return too_long ? 2 : 1;
}

/* The pairs grammar: where the value at ``value`` ends (a space, a separator but a thousands comma). */
static const uint8_t *
value_end_of_pair(const Table *table, const uint8_t *value, const uint8_t *end)
{
    const uint8_t *value_end = value, *ends = table->ends;
    while (end - value_end >= 8 && !(ends[value_end[0]] | ends[value_end[1]] | ends[value_end[2]] | ends[value_end[3]]
                                     | ends[value_end[4]] | ends[value_end[5]] | ends[value_end[6]] | ends[value_end[7]])) {
        value_end += 8; /* a printed float's bytes, eight at a time */
    }
    while (value_end < end && !ends_value(table, value_end, end)) value_end++;
    return value_end;
}

/* The pairs grammar's value brackets: where a whole list beginning at ``at`` ends (after its shut), NULL when none
 * begins there. */
static const uint8_t *
list_end(const Table *table, const uint8_t *at, const uint8_t *end)
{
    if (!table->value_open || at == end || *at != table->value_open) return NULL;
    const uint8_t *shut = memchr(at + 1, table->value_shut, (size_t)(end - at - 1));
    return shut ? shut + 1 : NULL;
}

/* A field (``index``; -1: a named value) whose value apply_pair would read as one number: each kind but a number
 * with a unit, a named value where the table renames none. */
static int
number_applies(const Table *table, Py_ssize_t index)
{
    return index < 0 ? !table->options : table->fields[index].kind != KIND_NUMBER_WITH_UNIT;
}

/* apply_pair of a pair whose value shaped_pairs read as the plain decimal ``number``: the same, without reading it
 * again (number_applies); 0, or -1 on error. */
static int
apply_number(Run *run, const Pair *pair, Py_ssize_t *named_hint)
{
    if (pair->field < 0) return note_named(run, pair->name, pair->name_length, pair->number, named_hint);
    const FieldSpec *field = &run->table->fields[pair->field];
    if (field->absent.length && same_text(pair->value, pair->value_length, field->absent)) return 0; /* not obtained */
    double value = pair->number;
    int has = 1;
    if (field->kind == KIND_DURATION) {
        value /= field->bare_per_second;
    }
    else if (field->kind == KIND_RECIPROCAL) { /* a rate: its period, none for 0 */
        has = value != 0;
        value = has ? 1.0 / value : 0;
    }
    run->slots[field->column] = (Slot){has, value, {NULL, 0}};
    return 0;
}

/* Whether read_pairs_line's loop jumps from name separator to name separator (a name is the name bytes right before
 * one), rather than looking at each byte (a table printing a list after a name without its separator). */
static int
jumps_to_separators(const Table *table)
{
    return !(table->value_open && table->spaced);
}

/* Whether the bytes at ``at`` go on from the byte before them (a name byte or a '.' after ``from``): no name of the
 * pairs grammar begins there. */
static int
goes_on_from_before(const Table *table, const uint8_t *from, const uint8_t *at)
{
    return at > from && (table->name_byte[at[-1]] || at[-1] == '.');
}

/* The pairs of a line whose pairs, from ``from``, print the shape's joints and names and nothing after the last value
 * (what the loop of read_pairs_line finds there, the same names passing the same checks): their count, 0 when it is
 * not such a line. */
static Py_ssize_t
shaped_pairs(const Run *run, const Shape *shape, const uint8_t *from, const uint8_t *end, Pair *pairs)
{
    const Table *table = run->table;
    const uint8_t *at = from, *kept = shape->names;
    for (Py_ssize_t i = 0; i < shape->count; i++) {
        Py_ssize_t joint = shape->joints[i], length = shape->lengths[i];
        if (i == 0 && jumps_to_separators(table)) {
            /* The first joint, the line's bytes before its pairs, may be other bytes (a timestamp): where the loop
             * jumps from name separator to name separator, its first pair is the name bytes before the first one,
             * whatever comes before them but a name byte or a '.' (read_pairs_line). */
            const uint8_t *separator = memchr(at, table->name_separator, (size_t)(end - at));
            const uint8_t *name = separator ? separator - length : NULL;
            if (name == NULL || name < at || !same_bytes(name, kept + joint, length)
                || goes_on_from_before(table, at, name)) {
                return 0;
            }
            at = name;
        } else {
            if (end - at < joint + length + 2 || !same_bytes(at, kept, joint + length)) return 0;
            at += joint;
        }
        kept += joint + length;
        const uint8_t *name_end = at + length, *value = name_end + 1;
        if (*name_end != table->name_separator) return 0;
        while (table->spaced && value < end && *value == ' ') value++;
        if (value == end || ends_value(table, value, end)) return 0;
        const uint8_t *value_end = list_end(table, value, end);
        double number = 0;
        int is_number = 0;
        if (value_end == NULL && table->numbers_ahead && i != shape->step_pair
            && number_applies(table, shape->fields[i]) && !may_wait(run, shape->fields[i], shape->named[i])) {
            /* A printed number read as its end is found: the value is the number when a value ends right after it. */
            value_end = simple_decimal_prefix(value, end, &number);
            is_number = value_end != NULL && (value_end == end || ends_value(table, value_end, end));
            if (!is_number) value_end = NULL;
        }
        if (value_end == NULL) value_end = value_end_of_pair(table, value, end);
        pairs[i] = (Pair){at, value, length, value_end - value, shape->fields[i], is_number, number};
        at = value_end;
    }
    return at == end ? shape->count : 0;
}

/* The line's pairs, from ``from``, as the shape of the lines after it (none when they do not fit). The loop finds the
 * same names after the same joints: what it does in a joint depends on the joint's bytes alone (and on the byte
 * before it, which ends a value: a space, a separator, a list's shut). */
static void
keep_shape(Run *run, const uint8_t *from, const Pair *pairs, Py_ssize_t count, Py_ssize_t step_pair)
{
    Shape *shape = &run->shapes[run->next_shape];
    run->next_shape = !run->next_shape;
    const Table *table = run->table;
    /* Where the loop looks at each byte (a list after a name without its separator), a joint holding a list's open
     * may be a pair on a line printing its shut later: no shape then. */
    const uint8_t open = table->value_open && table->spaced ? table->value_open : 0;
    Py_ssize_t used = 0;
    shape->count = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t joint = pairs[i].name - from;
        if (used + joint + pairs[i].name_length > SHAPE_BYTES) return;
        if (open && joint && memchr(from, open, (size_t)joint) != NULL) return;
        memcpy(shape->names + used, from, (size_t)(joint + pairs[i].name_length)); /* the joint, then the name */
        used += joint + pairs[i].name_length;
        shape->joints[i] = joint;
        shape->lengths[i] = pairs[i].name_length;
        shape->fields[i] = pairs[i].field;
        shape->named[i] = -1;
        from = pairs[i].value + pairs[i].value_length;
    }
    shape->step_pair = step_pair;
    shape->count = count;
}

/* The next ``word`` (not empty) at or after ``*at`` and ending by ``end``, not after a name byte (``line``: where the
 * line begins, after nothing): where it begins, NULL when there is none; ``*at`` is then past its first byte. */
static const uint8_t *
next_word(Text word, const uint8_t *line, const uint8_t **at, const uint8_t *end)
{
    while (end - *at >= word.length) {
        const uint8_t *found = memchr(*at, word.at[0], (size_t)(end - *at - word.length + 1));
        if (found == NULL) return NULL;
        *at = found + 1;
        if (memcmp(found, word.at, (size_t)word.length) == 0 && (found == line || !is_name(found[-1]))) return found;
    }
    return NULL;
}

/* The pairs grammar's options: the first ``name \\s* open \\s* digits / \\s* digits shut`` of the line (a step, an
 * outer count), ``name`` one of ``names`` not after a name byte (the earliest, the first of ``names`` at one place):
 * 1 with the count, the total, where it begins and where what follows it does; 0 none; 2 a number too long. With
 * ``count``, the fraction follows ``open \\s* digits shut \\s*`` after the name, those digits in ``*count``. */
static int
find_fraction(const Table *table, const Text *names, Py_ssize_t name_count, const uint8_t *line, const uint8_t *end,
              long long *count, long long *step, long long *total, const uint8_t **begins, const uint8_t **rest)
{
    const uint8_t *earliest = end;
    int found_as = 0;
    for (Py_ssize_t i = 0; i < name_count; i++) {
        const Text name = names[i];
        /* Once one is found, another name counts only where it begins before it. */
        const uint8_t *bound = end - earliest > name.length - 1 ? earliest + name.length - 1 : end, *at = line, *found;
        while ((found = next_word(name, line, &at, bound)) != NULL) {
            const uint8_t *digits = skip_spaces(found + name.length, end);
            long long step_found, total_found, count_found = 0;
            int too_long = 0;
            if (!expect_byte(&digits, end, table->step_open)) continue;
            digits = skip_spaces(digits, end);
            if (count != NULL) {
                if (!read_digits(&digits, end, &count_found, &too_long) || !expect_byte(&digits, end, table->step_shut)) {
                    continue;
                }
                digits = skip_spaces(digits, end);
                if (!expect_byte(&digits, end, table->step_open)) continue;
                digits = skip_spaces(digits, end);
            }
            if (!read_digits(&digits, end, &step_found, &too_long) || !expect_byte(&digits, end, '/')) continue;
            digits = skip_spaces(digits, end);
            if (!read_digits(&digits, end, &total_found, &too_long) || !expect_byte(&digits, end, table->step_shut)) {
                continue;
            }
            earliest = found;
            if (count != NULL) *count = count_found;
            *step = step_found;
            *total = total_found;
            *begins = found;
            *rest = digits;
            found_as = too_long ? 2 : 1;
            break;
        }
    }
    return found_as;
}

/* The name a named value of the pairs grammar's options is kept under: 1 with it in ``*name`` (``out`` room for
 * MAX_NAME bytes holding it where normalised) and ``*value`` without the unit its renaming drops, 0 not read (renamed
 * to nothing). */
static int
named_as(const Table *table, Text *name, Text *value, uint8_t *out)
{
    for (Py_ssize_t i = 0; i < table->renamed_count; i++) {
        if (!same_text(name->at, name->length, table->renamed_from[i])) continue;
        const Text unit = table->renamed_unit[i];
        if (unit.length && value->length >= unit.length
            && memcmp(value->at + value->length - unit.length, unit.at, (size_t)unit.length) == 0) {
            value->length -= unit.length;
        }
        *name = table->renamed_to[i];
        return name->length > 0;
    }
    for (Py_ssize_t i = 0; i < name->length; i++) {
        uint8_t byte = name->at[i];
        if ((byte >= 'a' && byte <= 'z') || is_digit(byte) || (byte == '_' && i > 0 && i < name->length - 1
                                                                 && name->at[i - 1] != '_')) {
            continue;
        }
        *name = (Text){out, normalise_name(name->at, name->at + name->length, out)};
        return 1;
    }
    return 1;
}

/* The bytes up to the first list item break at or after ``at`` (a ``/``, a comma but a thousands comma). */
static const uint8_t *
item_end(const uint8_t *at, const uint8_t *end)
{
    while (at < end && *at != '/' && (*at != ',' || is_thousands_separator(at, end))) at++;
    return at;
}

static void
strip(const uint8_t **at, const uint8_t **end)
{
    *at = skip_spaces(*at, *end);
    while (*end > *at && is_space((*end)[-1])) (*end)--;
}

/* The bytes from ``at`` to ``end`` stripped. */
static Text
stripped(const uint8_t *at, const uint8_t *end)
{
    strip(&at, &end);
    return (Text){at, end - at};
}

/* A value printed as a list: ``*value`` its first item, ``*second`` its second (length -1: none), stripped. */
static void
list_items(const Table *table, Text *value, Text *second)
{
    const uint8_t *at = value->at + 1, *end = value->at + value->length;
    if (end > at && end[-1] == table->value_shut) end--;
    const uint8_t *cut = item_end(at, end);
    *value = stripped(at, cut);
    if (cut < end) *second = stripped(cut + 1, item_end(cut + 1, end));
}

/* The pairs grammar: a pair whose value is no list (or a list's item): its field set, or its named value (renamed,
 * normalised, a word's number; ``hint`` note_named's, or NULL); 0, or -1 on error. */
static int
apply_listed_pair(Run *run, Py_ssize_t field, Text name, Text value, Py_ssize_t *hint)
{
    const Table *table = run->table;
    uint8_t normalised[MAX_NAME];
    if (table->options && field < 0) {
        if (!named_as(table, &name, &value, normalised)) return 0;
        for (Py_ssize_t i = 0; i < table->word_count; i++) {
            if (same_text(value.at, value.length, table->words[i])) {
                return note_named(run, name.at, name.length, table->word_numbers[i], hint);
            }
        }
    }
    return apply_pair(run, field, name.at, name.length, value.at, value.length, 0, hint);
}

/* An ANSI SGR escape at ``at`` (``ESC [ digits-or-semicolons m``): where it ends, NULL when none is there. */
static const uint8_t *
escape_end(const uint8_t *at, const uint8_t *end)
{
    if (end - at < 3 || at[0] != 0x1b || at[1] != '[') return NULL;
    for (at += 2; at < end && (is_digit(*at) || *at == ';'); at++);
    return at < end && *at == 'm' ? at + 1 : NULL;
}

/* The pairs grammar's escapes: the line in the run's own buffer without its SGR escapes (*line and *end moved there);
 * -1 when memory ran out (nothing raised: own_text). */
static int
unescape(Run *run, const uint8_t **line, const uint8_t **end)
{
    const uint8_t *at = memchr(*line, 0x1b, (size_t)(*end - *line));
    if (at == NULL) return 0;
    Py_ssize_t length = *end - *line;
    if (length > run->unescaped_capacity) {
        uint8_t *grown = PyMem_RawRealloc(run->unescaped, (size_t)length);
        if (grown == NULL) return -1;
        run->unescaped = grown;
        run->unescaped_capacity = length;
    }
    uint8_t *out = run->unescaped;
    memcpy(out, *line, (size_t)(at - *line));
    out += at - *line;
    while (at < *end) {
        const uint8_t *after = escape_end(at, *end);
        if (after != NULL) {
            at = after;
            continue;
        }
        const uint8_t *next = memchr(at + 1, 0x1b, (size_t)(*end - at - 1));
        if (next == NULL) next = *end;
        memcpy(out, at, (size_t)(next - at));
        out += next - at;
        at = next;
    }
    *line = run->unescaped;
    *end = out;
    return 0;
}

/* The pairs grammar's not_after: the name at ``name`` follows one of those words and one space. */
static int
after_word(const Table *table, const uint8_t *line, const uint8_t *name)
{
    for (Py_ssize_t i = 0; i < table->not_after_count; i++) {
        const Text word = table->not_after[i];
        if (name - line < word.length + 1) continue;
        const uint8_t *begins = name - 1 - word.length;
        if (name[-1] == ' ' && memcmp(begins, word.at, (size_t)word.length) == 0
            && !goes_on_from_before(table, line, begins)) {
            return 1;
        }
    }
    return 0;
}

/* The pairs grammar's item brackets: a value (no list) printing its second item in them after its first
 * (``171.79GiB(96.32%)``): ``*value`` its first item, ``*second`` the second, stripped; else left as they are. */
static void
bracketed_item(const Table *table, Text *value, Text *second)
{
    const uint8_t *at = value->at, *end = value->at + value->length;
    const uint8_t *open = value->length > 2 ? memchr(at + 1, table->item_open, (size_t)(value->length - 2)) : NULL;
    if (open == NULL || end[-1] != table->item_shut) return;
    *second = stripped(open + 1, end - 1);
    *value = stripped(at, open);
}

/* The pairs grammar's lead: the first ``lead \\s+ digits`` of the line (with a lead close, ``lead \\s+ digits close
 * \\s* digits \\s* / \\s* digits``), ``lead`` not after a name byte: 1 with the digits and where the pairs begin; 0
 * none; 2 a number too long. */
static int
find_lead(const Table *table, const uint8_t *line, const uint8_t *end, long long *lead, const uint8_t **rest)
{
    const Text word = table->lead;
    for (const uint8_t *at = line, *found; (found = next_word(word, line, &at, end)) != NULL;) {
        const uint8_t *after = found + word.length, *digits = skip_spaces(after, end);
        int too_long = 0;
        if (digits == after || !read_digits(&digits, end, lead, &too_long)) continue;
        if (table->lead_close) { /* a count of a total, not kept */
            long long count, total;
            if (!expect_byte(&digits, end, table->lead_close)) continue;
            digits = skip_spaces(digits, end);
            if (!read_digits(&digits, end, &count, &too_long)) continue;
            digits = skip_spaces(digits, end);
            if (!expect_byte(&digits, end, '/')) continue;
            digits = skip_spaces(digits, end);
            if (!read_digits(&digits, end, &total, &too_long)) continue;
        }
        *rest = digits;
        return too_long ? 2 : 1;
    }
    return 0;
}

/* The pairs grammar's line (step_fields.py): 1 read, 0 none or declined, -1 error. */
static int
read_pairs_line(Run *run, const uint8_t *line, const uint8_t *end)
{
    const Table *table = run->table;
    long long step = 0, total = 0;
    int has_total = 0;
    if (table->escapes && unescape(run, &line, &end) < 0) return -1;
    run->line_copied = line == run->unescaped; /* its values' bytes are gone with the next line: none waits */
    const uint8_t *from = line, *step_at = line, *outer_at, *outer_end;
    long long count_printed = 0, counts = 0, lead = 0, step_count = -1;
    if (table->lead.length && find_lead(table, line, end, &lead, &from) != 1) return 0;
    if (table->step_open) {
        int found = find_fraction(table, table->step_names, table->step_name_count, line, end, NULL, &step, &total,
                                  &step_at, &from);
        if (table->count_step_name_count) { /* a step after a count, where it is printed first */
            long long counted_step, counted_total, count;
            const uint8_t *counted_at, *counted_end;
            int counted = find_fraction(table, table->count_step_names, table->count_step_name_count, line, end, &count,
                                        &counted_step, &counted_total, &counted_at, &counted_end);
            if (counted && (!found || counted_at < step_at)) {
                found = counted;
                step = counted_step, total = counted_total, step_at = counted_at, from = counted_end, step_count = count;
            }
        }
        if (found != 1) return 0;
        has_total = step_count < 0; /* a counted step's total is the count's steps, no total of the run's */
        if (table->not_after_count && after_word(table, line, step_at)) return 0;
        if (table->outer.length && find_fraction(table, &table->outer, 1, line, step_at, NULL, &count_printed, &counts,
                                                 &outer_at, &outer_end) != 1) {
            return 0;
        }
    }
    Pair pairs[MAX_PAIRS];
    Shape *shape = NULL;
    Py_ssize_t count = 0;
    for (int i = 0; i < 2 && count == 0; i++) {
        shape = &run->shapes[i];
        count = shape->count ? shaped_pairs(run, shape, from, end, pairs) : 0;
        if (count) run->next_shape = !i; /* the other one is kept for the next line of another shape */
    }
    Py_ssize_t shaped = count > 0;
    Py_ssize_t step_pair = shaped ? shape->step_pair : -1, required_printed = shaped || table->required < 0;
    int marked = shaped || table->mark_count == 0; /* a shape is kept of a marked line */
    const uint8_t *name_byte = table->name_byte;
    /* A pair's name ends at a name separator: the words before the next one are no names, jumped over (but a name
     * printed before a list without its colon). */
    const int jumps = jumps_to_separators(table);
    for (const uint8_t *at = shaped ? end : from; at < end;) {
        if (jumps) {
            const uint8_t *separator = memchr(at, table->name_separator, (size_t)(end - at)), *word = separator;
            if (separator == NULL) break;
            while (word > at && name_byte[word[-1]]) word--;
            at = word < separator ? word : separator;
        }
        if (!is_name_start(*at) || goes_on_from_before(table, from, at)) {
            at++;
            continue;
        }
        const uint8_t *name_end = at;
        while (name_end < end && name_byte[*name_end]) name_end++;
        const uint8_t *value = end, *listed_end = NULL;
        if (name_end < end && *name_end == table->name_separator) {
            value = name_end + 1;
            while (table->spaced && value < end && *value == ' ') value++;
            listed_end = list_end(table, value, end);
        }
        else if (table->value_open && table->spaced) { /* ``name [1.5]``: ``name: [1.5]`` without its colon */
            const uint8_t *listed = skip_spaces(name_end, end);
            listed_end = list_end(table, listed, end);
            if (listed_end) value = listed;
        }
        if (value == end || ends_value(table, value, end)) {
            at++;
            continue;
        }
        const uint8_t *value_end = listed_end ? listed_end : value_end_of_pair(table, value, end);
        if (count == MAX_PAIRS || (table->options && name_end - at > MAX_NAME)) return 0;
        Pair *pair = &pairs[count];
        *pair = (Pair){at, value, name_end - at, value_end - value, field_named(table, at, name_end - at)};
        /* A name twice, two names of one column, two step names: the dict reading is the per-line reader's. */
        for (Py_ssize_t before = 0; before < count; before++) {
            if (same_text(pair->name, pair->name_length, (Text){pairs[before].name, pairs[before].name_length})) return 0;
            if (pair->field >= 0 && pairs[before].field >= 0
                && table->fields[pair->field].column == table->fields[pairs[before].field].column) {
                return 0;
            }
        }
        for (Py_ssize_t i = 0; !table->step_open && i < table->step_name_count; i++) {
            if (!same_text(pair->name, pair->name_length, table->step_names[i])) continue;
            if (step_pair >= 0 || (table->not_after_count && after_word(table, line, pair->name))) return 0;
            step_pair = count;
        }
        if (pair->field >= 0 && table->fields[pair->field].column == table->required) required_printed = 1;
        marked = marked || is_one_of((Text){pair->name, pair->name_length}, table->marks, table->mark_count);
        count++;
        at = value_end;
    }
    if (!required_printed || !marked) return 0;
    /* A step's name after one of the table's words: the loop's check, which the shape's pairs did not pass. */
    if (shaped && step_pair >= 0 && table->not_after_count && after_word(table, line, pairs[step_pair].name)) return 0;
    if (!shaped && (step_pair >= 0 || table->step_open)) keep_shape(run, from, pairs, count, step_pair);
    if (!table->step_open) {
        const Pair *printed = step_pair >= 0 ? &pairs[step_pair] : NULL;
        if (printed == NULL || read_step_value(printed->value, printed->value + printed->value_length, &step,
                                               &has_total, &total) != 1) {
            return 0;
        }
    }
    const long long printed[4] = {count_printed, counts, step, total};
    if (table->outer.length) { /* the step counts within the outer count: 2**63 and beyond is the per-line reader's */
        long long before;
        if (__builtin_mul_overflow(count_printed > 1 ? count_printed - 1 : 0, total, &before)
            || __builtin_add_overflow(before, step, &step) || __builtin_mul_overflow(counts, total, &total)) {
            return 0;
        }
    }
    if (step_count >= 0) { /* the step counts within the count: 2**63 and beyond is the per-line reader's */
        long long before;
        if (__builtin_mul_overflow(step_count > 1 ? step_count - 1 : 0, total, &before)
            || __builtin_add_overflow(before, step, &step)) {
            return 0;
        }
    }
    /* A step going back (a restart) starts a new batch: the caller reads that line itself. */
    if (run->count > 0 && step < run->steps[run->count - 1]) return 0;
    memset(run->slots, 0, (size_t)table->columns * sizeof(Slot));
    run->line_named = 0;
    if (step_count >= 0
        && note_named(run, table->step_count_name.at, table->step_count_name.length, (double)step_count, NULL) < 0) {
        return -1;
    }
    if (table->lead.length && note_named(run, table->lead_name.at, table->lead_name.length, (double)lead, NULL) < 0) {
        return -1;
    }
    for (int i = 0; table->outer.length && i < 4; i++) {
        const Text name = table->outer_names[i];
        if (name.length && note_named(run, name.at, name.length, (double)printed[i], NULL) < 0) return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (i == step_pair) continue;
        if (pairs[i].is_number) {
            if (apply_number(run, &pairs[i], &shape->named[i]) < 0) return -1;
            continue;
        }
        Text value = {pairs[i].value, pairs[i].value_length}, second = {NULL, -1};
        if (table->value_open && value.at[0] == table->value_open) list_items(table, &value, &second);
        else if (table->item_open) bracketed_item(table, &value, &second);
        int applied = apply_listed_pair(run, pairs[i].field, (Text){pairs[i].name, pairs[i].name_length}, value,
                                        shaped ? &shape->named[i] : NULL);
        for (Py_ssize_t kept = 0; applied == 0 && second.length >= 0 && kept < table->second_count; kept++) {
            if (same_text(pairs[i].name, pairs[i].name_length, table->seconds_from[kept])) {
                applied = apply_listed_pair(run, -1, table->seconds_to[kept], second, NULL);
            }
        }
        if (applied < 0) return applied;
    }
    return commit(run, step, has_total, total) < 0 ? -1 : 1;
}

/* The segments grammar: the first ``[lead \\s+ digits , \\s*] step_name \\s+ digits / \\s* digits \\s*
 * pair_separator`` of the line (with a step close, ``... step_name \\s+ digits \\s* step_close``), its first word
 * not after a name byte: 1 with the lead's digits, the step, the total and where the segments begin; 0 none; 2 a
 * number too long. */
static int
find_segments_record(const Table *table, const uint8_t *line, const uint8_t *end, long long *lead, long long *step,
                     long long *total, const uint8_t **rest)
{
    const Text first = table->lead.length ? table->lead : table->step_name;
    for (const uint8_t *at = line, *found; (found = next_word(first, line, &at, end)) != NULL;) {
        const uint8_t *after = found + first.length, *digits;
        int too_long = 0;
        if (table->lead.length) {
            digits = skip_spaces(after, end);
            if (digits == after || !read_digits(&digits, end, lead, &too_long) || !expect_byte(&digits, end, ',')) continue;
            after = skip_spaces(digits, end);
            if (!expect(&after, end, table->step_name)) continue;
        }
        digits = skip_spaces(after, end);
        if (digits == after || !read_digits(&digits, end, step, &too_long)) continue;
        if (table->step_close) { /* no total */
            digits = skip_spaces(digits, end);
            if (!expect_byte(&digits, end, table->step_close)) continue;
            *rest = digits;
            return too_long ? 2 : 1;
        }
        if (!expect_byte(&digits, end, '/')) continue;
        digits = skip_spaces(digits, end);
        if (!read_digits(&digits, end, total, &too_long)) continue;
        digits = skip_spaces(digits, end);
        if (!expect_byte(&digits, end, table->pair_separator)) continue;
        *rest = digits;
        return too_long ? 2 : 1;
    }
    return 0;
}

/* normalised_name of the printed name: parenthesised text (and the spaces before it) left out, lowercase, each run
 * of other bytes than [0-9a-z] one ``_``, none at either end; its length in ``out`` (room for the name's). */
static Py_ssize_t
normalise_name(const uint8_t *at, const uint8_t *end, uint8_t *out)
{
    Py_ssize_t length = 0;
    int gap = 0;
    while (at < end) {
        const uint8_t *open = skip_spaces(at, end);
        if (open < end && *open == '(') {
            const uint8_t *close = memchr(open, ')', (size_t)(end - open));
            if (close != NULL) {
                at = close + 1;
                continue;
            }
        }
        for (const uint8_t *byte = at; byte <= open && byte < end; byte++) {
            uint8_t lower = (*byte >= 'A' && *byte <= 'Z') ? (uint8_t)(*byte + ('a' - 'A')) : *byte;
            if ((lower >= 'a' && lower <= 'z') || is_digit(lower)) {
                if (gap && length) out[length++] = '_';
                out[length++] = lower;
                gap = 0;
            } else {
                gap = 1;
            }
        }
        at = open + 1;
    }
    return length;
}

/* The bare duration unit the printed name holds in its first parentheses: units a second, or 0. */
static double
unit_in_name(const uint8_t *at, const uint8_t *end)
{
    const uint8_t *open = memchr(at, '(', (size_t)(end - at));
    const uint8_t *close = open ? memchr(open, ')', (size_t)(end - open)) : NULL;
    return close ? duration_unit(open + 1, close - open - 1) : 0;
}

/* The name printed at ``at`` as the segment ``place`` of a line: its entry of the run's names, normalised and looked
 * up when the line before printed another name there. */
static SegmentName *
segment_name(Run *run, Py_ssize_t place, const uint8_t *at, const uint8_t *end)
{
    const Table *table = run->table;
    SegmentName *known = &run->segment_names[place];
    Py_ssize_t length = end - at;
    if (known->printed_length == length && memcmp(known->printed, at, (size_t)length) == 0) return known;
    memcpy(known->printed, at, (size_t)length);
    known->printed_length = length;
    const uint8_t *kept = at;
    if (length >= table->dropped.length && same_text(at, table->dropped.length, table->dropped)) {
        kept += table->dropped.length;
    }
    known->name_length = normalise_name(kept, end, known->name);
    known->field = field_named(table, known->name, known->name_length);
    known->bare_per_second = unit_in_name(at, end);
    known->named = -1;
    known->is_step = table->step_segment.length && same_text(known->name, known->name_length, table->step_segment);
    known->is_counted = known->field < 0 && table->counted.length
                        && same_text(known->name, known->name_length, table->counted);
    return known;
}

typedef struct {
    SegmentName *name;
    const uint8_t *value;
    Py_ssize_t value_length;
} Segment;

/* A percent (``mfu 16.68%``, the number's ``length`` bytes before the ``%``): the named value of the name and the
 * table's percent suffix, none below 0 (a sentinel); 0, or -1 on error. */
static int
apply_percent(Run *run, SegmentName *name, const uint8_t *number, Py_ssize_t length)
{
    const Text suffix = run->table->percent;
    double value;
    int parsed = parse_float(number, length, &value, run->interpreter);
    if (parsed <= 0 || value < 0) return parsed < 0 ? parsed : 0;
    uint8_t full[MAX_NAME + MAX_PERCENT];
    memcpy(full, name->name, (size_t)name->name_length);
    memcpy(full + name->name_length, suffix.at, (size_t)suffix.length);
    return note_named(run, full, name->name_length + suffix.length, value, &name->named);
}

/* The segments grammar's line (step_fields.py): 1 read, 0 none or declined, -1 error, NEEDS_INTERPRETER (nothing of
 * the line is in the run). */
static int
read_segments_line(Run *run, const uint8_t *line, const uint8_t *end)
{
    const Table *table = run->table;
    long long lead = 0, step, total;
    const uint8_t *at;
    if (find_segments_record(table, line, end, &lead, &step, &total, &at) != 1) return 0;
    Segment segments[MAX_PAIRS];
    Py_ssize_t count = 0;
    for (;;) {
        SegmentName *known = count < MAX_PAIRS ? &run->segment_names[count] : NULL;
        Py_ssize_t head = known ? known->head_length : 0;
        if (head && end - at > head && at[head] == table->name_separator && memcmp(at, known->head, (size_t)head) == 0) {
            /* The line before's bytes up to this segment's name separator: its name, and no separator before. */
            const uint8_t *value = at + head + 1;
            const uint8_t *segment_end = memchr(value, table->pair_separator, (size_t)(end - value));
            const uint8_t *value_end = segment_end ? segment_end : end;
            strip(&value, &value_end);
            segments[count++] = (Segment){known, value, value_end - value};
            if (segment_end == NULL) break;
            at = segment_end + 1;
            continue;
        }
        const uint8_t *segment_end = memchr(at, table->pair_separator, (size_t)(end - at));
        if (segment_end == NULL) segment_end = end;
        const uint8_t *name = at, *name_end, *value, *value_end = segment_end;
        const uint8_t *separator = memchr(at, table->name_separator, (size_t)(segment_end - at));
        if (separator != NULL) {
            name_end = separator;
            value = separator + 1;
        } else { /* the segment stripped, its last word the value */
            strip(&name, &value_end);
            const uint8_t *space = value_end;
            while (space > name && space[-1] != ' ') space--;
            name_end = space > name ? space - 1 : name;
            value = space;
        }
        strip(&name, &name_end);
        strip(&value, &value_end);
        if (name_end > name) {
            if (count == MAX_PAIRS || name_end - name > MAX_NAME) return 0;
            SegmentName *named = segment_name(run, count, name, name_end);
            named->head_length = separator && separator - at <= MAX_HEAD ? separator - at : 0;
            memcpy(named->head, at, (size_t)named->head_length);
            segments[count++] = (Segment){named, value, value_end - value};
        }
        if (segment_end == end) break;
        at = segment_end + 1;
    }
    for (Py_ssize_t i = 0; table->step_segment.length && i < count; i++) {
        const SegmentName *name = segments[i].name;
        if (!name->is_step) continue;
        int has_total;
        if (read_step_value(segments[i].value, segments[i].value + segments[i].value_length, &step, &has_total,
                            &total) != 1 || has_total) {
            return 0; /* not digits: the per-line reader's */
        }
    }
    /* A step going back (a restart) starts a new batch: the caller reads that line itself. */
    if (run->count > 0 && step < run->steps[run->count - 1]) return 0;
    if (table->counted.length) { /* its latest number: the per-line reader's when not 0 */
        double counted = 0;
        for (Py_ssize_t i = 0; i < count; i++) {
            const SegmentName *name = segments[i].name;
            if (!name->is_counted) continue;
            double value;
            int parsed = parse_float(segments[i].value, segments[i].value_length, &value, run->interpreter);
            if (parsed < 0) return parsed;
            if (parsed == 1) counted = value;
        }
        if (counted != 0) return 0;
    }
    memset(run->slots, 0, (size_t)table->columns * sizeof(Slot));
    run->line_named = 0;
    if (table->lead.length && note_named(run, table->lead_name.at, table->lead_name.length, (double)lead, NULL) < 0) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        SegmentName *name = segments[i].name;
        if (name->is_step) continue;
        const uint8_t *value = segments[i].value;
        Py_ssize_t length = segments[i].value_length;
        if (table->percent.length && name->field < 0 && length && value[length - 1] == '%') {
            int applied = apply_percent(run, name, value, length - 1);
            if (applied < 0) return applied;
            continue;
        }
        int applied = apply_pair(run, name->field, name->name, name->name_length, value, length,
                                 name->bare_per_second, &name->named);
        if (applied < 0) return applied;
    }
    return commit(run, step, !table->step_segment.length && !table->step_close, total) < 0 ? -1 : 1;
}

/* The JSON grammar: a value's kind (JSON_STRING its bytes between the quotes), 0 for one the kernel does not read. */
enum { JSON_STRING = 1, JSON_INTEGER = 2, JSON_NUMBER = 3, JSON_LITERAL = 4 };

/* JSON's whitespace but the line breaks: a line holding ``\r`` is the per-line reader's. */
static const uint8_t *
json_space(const uint8_t *at, const uint8_t *end)
{
    while (at < end && (*at == ' ' || *at == '\t')) at++;
    return at;
}

/* The string whose opening quote is at ``*at``: its bytes, *at past its closing quote; 0 when it holds an escape or
 * a control byte, or is not closed. */
static int
json_string(const uint8_t **at, const uint8_t *end, Text *text)
{
    const uint8_t *start = *at + 1, *byte = start;
#ifdef __SSE2__
    /* Sixteen bytes at a time up to the first quote, backslash or control byte (its unsigned minimum with 0x1f). */
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), controls = _mm_set1_epi8(0x1f);
    for (; end - byte >= 16; byte += 16) {
        __m128i bytes = _mm_loadu_si128((const __m128i *)byte);
        __m128i stops = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(bytes, quote), _mm_cmpeq_epi8(bytes, backslash)),
                                     _mm_cmpeq_epi8(_mm_min_epu8(bytes, controls), bytes));
        int found = _mm_movemask_epi8(stops);
        if (found) {
            byte += __builtin_ctz((unsigned)found);
            break;
        }
    }
#endif
    while (byte < end && *byte != '"' && *byte != '\\' && *byte >= 0x20) byte++;
    if (byte == end || *byte != '"') return 0;
    *text = (Text){start, byte - start};
    *at = byte + 1;
    return 1;
}

/* The value at ``*at``: its kind and bytes, *at past it; 0 for an object, an array, a string holding an escape or
 * anything JSON does not read. */
static int
json_value(const uint8_t **at, const uint8_t *end, Text *value)
{
    static const char *const literals[] = {"null", "true", "false", "NaN", "Infinity", "-Infinity"};
    const uint8_t *start = *at, *byte = start;
    if (byte == end) return 0;
    if (*byte == '"') return json_string(at, end, value) ? JSON_STRING : 0;
    /* A number begins with a digit or a minus and a digit: no literal does. */
    int number = is_digit(*byte) || (*byte == '-' && end - byte > 1 && is_digit(byte[1]));
    for (size_t i = 0; !number && i < sizeof literals / sizeof *literals; i++) {
        size_t length = strlen(literals[i]);
        if ((size_t)(end - byte) >= length && memcmp(byte, literals[i], length) == 0) {
            *value = (Text){byte, (Py_ssize_t)length};
            *at = byte + length;
            return JSON_LITERAL;
        }
    }
    int kind = JSON_INTEGER;
    if (*byte == '-') byte++;
    if (byte == end || !is_digit(*byte)) return 0;
    if (*byte++ != '0') {
        while (byte < end && is_digit(*byte)) byte++;
    }
    if (byte < end && *byte == '.') {
        if (++byte == end || !is_digit(*byte)) return 0;
        while (byte < end && is_digit(*byte)) byte++;
        kind = JSON_NUMBER;
    }
    if (byte < end && (*byte == 'e' || *byte == 'E')) {
        if (++byte < end && (*byte == '+' || *byte == '-')) byte++;
        if (byte == end || !is_digit(*byte)) return 0;
        while (byte < end && is_digit(*byte)) byte++;
        kind = JSON_NUMBER;
    }
    *value = (Text){start, byte - start};
    *at = byte;
    return kind;
}

typedef struct {
    SegmentName *name;
    Text value;
    int kind;
} Member;

/* The key printed at ``key`` as the member ``place`` of a line: its entry of the run's names, normalised and looked
 * up when the line before printed another key there. */
static SegmentName *
member_name(Run *run, Py_ssize_t place, Text key)
{
    const Table *table = run->table;
    SegmentName *known = &run->segment_names[place];
    if (known->printed_length == key.length && memcmp(known->printed, key.at, (size_t)key.length) == 0) return known;
    if (run->checked > place) run->checked = place;
    memcpy(known->printed, key.at, (size_t)key.length);
    known->printed_length = key.length;
    if (key.length >= table->dropped.length && same_text(key.at, table->dropped.length, table->dropped)) {
        key = (Text){key.at + table->dropped.length, key.length - table->dropped.length};
    }
    known->name_length = normalise_name(key.at, key.at + key.length, known->name);
    for (Py_ssize_t i = 0; table->json && i < table->renamed_count; i++) {
        if (!same_text(known->name, known->name_length, table->renamed_from[i])) continue;
        memcpy(known->name, table->renamed_to[i].at, (size_t)table->renamed_to[i].length);
        known->name_length = table->renamed_to[i].length;
        break;
    }
    Text name = {known->name, known->name_length};
    known->field = field_named(table, name.at, name.length);
    known->named = -1;
    known->is_step = is_one_of(name, table->step_names, table->step_name_count);
    known->is_total = is_one_of(name, table->total_names, table->total_name_count);
    known->declines = is_one_of(name, table->declines, table->decline_count);
    return known;
}

/* A member's value as a step or a total: 1 with it, for digits (at most MAX_DIGITS) printed as an integer or a
 * string. */
static int
json_count(const Member *member, long long *count)
{
    const uint8_t *at = member->value.at, *end = at + member->value.length;
    int too_long = 0;
    return (member->kind == JSON_INTEGER || member->kind == JSON_STRING) && read_digits(&at, end, count, &too_long)
           && at == end && !too_long;
}

/* The JSON grammar's line (step_fields.py): 1 read, 0 none or declined, -1 error. */
static int
read_json_line(Run *run, const uint8_t *line, const uint8_t *end)
{
    const Table *table = run->table;
    const uint8_t *at = memchr(line, '{', (size_t)(end - line));
    if (at == NULL || memchr(line, '\r', (size_t)(end - line)) != NULL) return 0;
    at = json_space(at + 1, end);
    Member members[MAX_PAIRS];
    Py_ssize_t count = 0, step_member = -1, total_member = -1;
    int required_printed = table->required < 0, marked = table->mark_count == 0;
    if (at < end && *at == '}') {
        at++;
    }
    else for (;;) {
        Text key, value;
        if (at == end || *at != '"' || !json_string(&at, end, &key) || key.length > MAX_NAME) return 0;
        at = json_space(at, end);
        if (!expect_byte(&at, end, ':')) return 0;
        at = json_space(at, end);
        int kind = json_value(&at, end, &value);
        if (kind == 0 || count == MAX_PAIRS || (kind == JSON_INTEGER && value.length > MAX_JSON_INTEGER)) return 0;
        if (kind == JSON_STRING && value.length && (value.at[0] == ' ' || value.at[value.length - 1] == ' ')) {
            return 0; /* the kinds' readers do not all strip: the per-line reader's */
        }
        if (kind == JSON_INTEGER && value.length == 2 && value.at[0] == '-' && value.at[1] == '0') {
            value = (Text){value.at + 1, 1}; /* json.loads reads an int: no negative zero */
        }
        SegmentName *name = member_name(run, count, key);
        members[count] = (Member){name, value, kind};
        /* A name twice, two names of one column, two step or total names: the dict reading is the per-line
         * reader's; so are the lines the table leaves to it. Names the line before printed alike were checked. */
        for (Py_ssize_t before = count < run->checked ? count : 0; before < count; before++) {
            const SegmentName *other = members[before].name;
            if (same_text(name->name, name->name_length, (Text){other->name, other->name_length})) return 0;
            if (name->field >= 0 && other->field >= 0
                && table->fields[name->field].column == table->fields[other->field].column) {
                return 0;
            }
            if ((name->is_step && other->is_step) || (name->is_total && other->is_total)) return 0;
        }
        if (name->declines) return 0;
        if (run->checked == count) run->checked = count + 1;
        if (name->is_step) step_member = count;
        if (name->is_total) total_member = count;
        if (name->field >= 0 && table->fields[name->field].column == table->required) required_printed = 1;
        marked = marked || is_one_of((Text){name->name, name->name_length}, table->marks, table->mark_count);
        count++;
        at = json_space(at, end);
        if (at < end && *at == ',') {
            at = json_space(at + 1, end);
            continue;
        }
        if (!expect_byte(&at, end, '}')) return 0;
        break;
    }
    if (json_space(at, end) != end || !required_printed || !marked || step_member < 0) return 0;
    /* The step and the total: digits (a literal total: none); others the per-line reader's. */
    long long step, total = 0;
    int has_total = 0;
    if (!json_count(&members[step_member], &step)) return 0;
    if (total_member >= 0) { /* a literal: none */
        has_total = members[total_member].kind != JSON_LITERAL;
        if (has_total && !json_count(&members[total_member], &total)) return 0;
    }
    /* A step going back (a restart) starts a new batch: the caller reads that line itself. */
    if (run->count > 0 && step < run->steps[run->count - 1]) return 0;
    memset(run->slots, 0, (size_t)table->columns * sizeof(Slot));
    run->line_named = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (i == step_member || i == total_member) continue;
        SegmentName *name = members[i].name;
        int applied = apply_pair(run, name->field, name->name, name->name_length, members[i].value.at,
                                 members[i].value.length, 0, &name->named);
        if (applied < 0) return applied;
    }
    return commit(run, step, has_total, total) < 0 ? -1 : 1;
}

/* 1: the line's record was read into the run; 0: it holds none or is declined; -1: error (raised, or memory ran
 * out); NEEDS_INTERPRETER: a number of it is float()'s to read (the run holds the line's named values in part). */
static int
read_line(Run *run, const uint8_t *line, const uint8_t *end, int ascii)
{
    const Table *table = run->table;
    if (!ascii || is_tagged(table, line, end)) return 0;
    if (table->pairs) return read_pairs_line(run, line, end);
    if (table->segments) return read_segments_line(run, line, end);
    if (table->json) return read_json_line(run, line, end);
    const uint8_t *opener = line;
    while ((opener = memchr(opener, table->opener, (size_t)(end - opener))) != NULL) {
        long long step, total;
        const uint8_t *body, *body_end;
        int found = match_record(table, opener, end, &step, &total, &body, &body_end);
        if (found == 0) {
            opener++;
            continue;
        }
        if (found == 2) return 0;
        /* A step going back (a restart) starts a new batch: the caller reads that line itself. */
        if (run->count > 0 && step < run->steps[run->count - 1]) return 0;
        memset(run->slots, 0, (size_t)table->columns * sizeof(Slot));
        run->line_named = 0;
        int applied = read_pairs(run, body, body_end);
        if (applied < 0) return applied;
        return commit(run, step, 1, total) < 0 ? -1 : 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The reader: runs read one after the other, taken as one                                    */

typedef struct {
    PyObject_HEAD
    PyObject *table_object; /* the table tuple: its bytes back the texts of ``table`` */
    Table table;
    Run run;
    Py_ssize_t jobs; /* StepsAhead reading by its table: it is not initialised again meanwhile */
} StepReader;



static PyObject *
text_or_none(Text text)
{
    return text.length ? PyUnicode_DecodeASCII((const char *)text.at, text.length, NULL) : Py_NewRef(Py_None);
}

/* The steps of a series' lines, ``rows`` of the run's lines: the run's own ``steps`` when every line printed the
 * value and they are a range (immutable: shared, not copied), else a list, the items the run's list holds when it
 * is one. */
static PyObject *
series_steps_of(const Run *run, PyObject *steps, const Py_ssize_t *rows, Py_ssize_t count)
{
    int ranged = PyRange_Check(steps);
    if (ranged && count == run->count) return Py_NewRef(steps);
    PyObject *series_steps = PyList_New(count);
    for (Py_ssize_t i = 0; series_steps != NULL && i < count; i++) {
        PyObject *step = ranged ? PyLong_FromLongLong(run->steps[rows[i]]) : Py_NewRef(PyList_GET_ITEM(steps, rows[i]));
        if (step == NULL) Py_CLEAR(series_steps);
        else PyList_SET_ITEM(series_steps, i, step);
    }
    return series_steps;
}

static PyObject *
column_result(const Run *run, const Column *column, PyObject *steps)
{
    int series = column->series;
    PyObject *latest = column->has ? PyFloat_FromDouble(column->value) : Py_NewRef(Py_None);
    PyObject *unit = text_or_none(text_of_owned(&column->unit));
    PyObject *series_steps = series ? series_steps_of(run, steps, column->rows, column->count) : Py_NewRef(Py_None);
    /* The values as an array('d'), not a float object each: the detectors and the rows' writer read its buffer. */
    PyObject *series_values = series ? items_array("d", column->values, column->count * (Py_ssize_t)sizeof(double))
                                     : Py_NewRef(Py_None);
    PyObject *result = NULL;
    if (latest && unit && series_steps && series_values) {
        result = PyTuple_Pack(4, latest, unit, series_steps, series_values);
    }
    Py_XDECREF(latest);
    Py_XDECREF(unit);
    Py_XDECREF(series_steps);
    Py_XDECREF(series_values);
    return result;
}

/* A named value's every value: ``(steps, values)``, each value's line's step and the values as an array('d'). */
static PyObject *
named_series(const Run *run, const Named *named, PyObject *steps)
{
    PyObject *series_steps = series_steps_of(run, steps, named->rows, named->count);
    PyObject *values = items_array("d", named->values, named->count * (Py_ssize_t)sizeof(double));
    PyObject *result = NULL;
    if (series_steps && values) result = PyTuple_Pack(2, series_steps, values);
    Py_XDECREF(series_steps);
    Py_XDECREF(values);
    return result;
}

/* A run's steps: a range when they go up by one difference (a line a step, or one every log interval: no int
 * object a line, and the detectors read it as such), else a list. */
static PyObject *
steps_result(const Run *run)
{
    const long long *steps = run->steps;
    Py_ssize_t count = run->count;
    long long difference = count > 1 ? steps[1] - steps[0] : 1;
    int ranged = count > 0 && difference > 0 && steps[count - 1] <= LLONG_MAX - difference;
    for (Py_ssize_t i = 2; ranged && i < count; i++) ranged = steps[i] - steps[i - 1] == difference;
    if (ranged) {
        return PyObject_CallFunction((PyObject *)&PyRange_Type, "LLL", steps[0], steps[count - 1] + difference,
                                     difference);
    }
    PyObject *list = PyList_New(count);
    for (Py_ssize_t i = 0; list != NULL && i < count; i++) {
        PyObject *step = PyLong_FromLongLong(steps[i]);
        if (step == NULL) Py_CLEAR(list);
        else PyList_SET_ITEM(list, i, step);
    }
    return list;
}

static PyObject *
run_result(const Run *run)
{
    PyObject *steps = steps_result(run);
    PyObject *total = run->has_total ? PyLong_FromLongLong(run->total) : Py_NewRef(Py_None);
    PyObject *fields = PyTuple_New(run->table->columns);
    PyObject *named = PyList_New(run->named_count);
    PyObject *result = NULL;
    if (!steps || !total || !fields || !named) goto done;
    for (Py_ssize_t i = 0; i < run->table->columns; i++) {
        PyObject *column = column_result(run, &run->columns[i], steps);
        if (column == NULL) goto done;
        PyTuple_SET_ITEM(fields, i, column);
    }
    for (Py_ssize_t i = 0; i < run->named_count; i++) {
        const Named *value = &run->named[i];
        PyObject *name = PyUnicode_DecodeASCII((const char *)value->name.at, value->name.length, NULL);
        PyObject *every = value->every ? named_series(run, value, steps) : Py_NewRef(Py_None);
        if (name == NULL || every == NULL) {
            Py_XDECREF(name);
            Py_XDECREF(every);
            goto done;
        }
        PyObject *entry = Py_BuildValue("(NdnnnN)", name, value->value, value->lines, value->first_line,
                                        value->position, every); /* N: both taken, also on failure */
        if (entry == NULL) goto done;
        PyList_SET_ITEM(named, i, entry);
    }
    result = PyTuple_Pack(4, steps, total, fields, named);
done:
    Py_XDECREF(steps);
    Py_XDECREF(total);
    Py_XDECREF(fields);
    Py_XDECREF(named);
    return result;
}

/* ``unread``'s value into ``*value``: 0, or -1 with an exception. */
static int
read_unread(Unread *unread, double *value)
{
    int parsed = parse_float(unread->at, unread->length, value, 1);
    *unread = (Unread){NULL, 0};
    if (parsed == 1) return 0;
    if (!PyErr_Occurred()) { /* a plain decimal, which parse_float always reads: only memory can fail it */
        if (parsed < 0) PyErr_NoMemory();
        else PyErr_SetString(PyExc_SystemError, "a plain decimal was not read");
    }
    return -1;
}

/* The values the read left as their bytes (Unread), read while the data they are in is held (at the end of each
 * read, with the interpreter): 0, or -1 with an exception. */
static int
settle_run(Run *run)
{
    for (Py_ssize_t i = 0; run->columns && i < run->table->columns; i++) {
        Column *column = &run->columns[i];
        if (column->unread.at && read_unread(&column->unread, &column->value) < 0) return -1;
    }
    for (Py_ssize_t i = 0; i < run->named_count; i++) {
        Named *named = &run->named[i];
        if (named->unread.at && read_unread(&named->unread, &named->value) < 0) return -1;
    }
    return 0;
}

/* Forget what was read, keep the memory. */
static void
clear_run(Run *run)
{
    run->count = 0;
    run->has_total = 0;
    for (Py_ssize_t i = 0; run->columns && i < run->table->columns; i++) {
        Column *column = &run->columns[i];
        column->has = 0;
        column->unread = (Unread){NULL, 0};
        column->unit.length = 0;
        column->count = 0;
    }
    for (Py_ssize_t i = 0; i < run->named_count; i++) {
        PyMem_RawFree(run->named[i].name.at);
        PyMem_RawFree(run->named[i].rows);
        PyMem_RawFree(run->named[i].values);
    }
    run->named_count = 0;
}

static void
free_run(Run *run)
{
    clear_run(run);
    for (Py_ssize_t i = 0; run->columns && i < run->table->columns; i++) {
        PyMem_RawFree(run->columns[i].unit.at);
        PyMem_RawFree(run->columns[i].rows);
        PyMem_RawFree(run->columns[i].values);
    }
    PyMem_RawFree(run->columns);
    PyMem_RawFree(run->slots);
    PyMem_RawFree(run->steps);
    PyMem_RawFree(run->named);
    PyMem_RawFree(run->segment_names);
    PyMem_RawFree(run->unescaped);
    *run = (Run){0};
}

/* An empty run of ``table``; -1 when memory ran out (nothing raised). */
static int
new_run(Run *run, const Table *table, int interpreter)
{
    *run = (Run){.table = table, .interpreter = interpreter};
    run->columns = PyMem_RawCalloc((size_t)table->columns + 1, sizeof(Column));
    run->slots = PyMem_RawCalloc((size_t)table->columns + 1, sizeof(Slot));
    if (run->columns == NULL || run->slots == NULL) return -1;
    if ((table->segments || table->json)
        && (run->segment_names = PyMem_RawCalloc(MAX_PAIRS, sizeof(SegmentName))) == NULL) {
        return -1;
    }
    for (Py_ssize_t i = 0; run->segment_names && i < MAX_PAIRS; i++) run->segment_names[i].printed_length = -1; /* none */
    for (Py_ssize_t i = 0; i < table->columns; i++) run->columns[i].series = table->fields[first_of_column(table, i)].series;
    return 0;
}

static int
StepReader_init(StepReader *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"table", NULL};
    PyObject *table;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O", keywords, &table)) return -1;
    if (self->jobs) {
        PyErr_SetString(PyExc_RuntimeError, "a reader whose table steps ahead are read by is not initialised again");
        return -1;
    }
    free_run(&self->run);
    PyMem_Free(self->table.fields);
    self->table = (Table){0};
    Py_XSETREF(self->table_object, Py_NewRef(table));
    if (read_table(table, &self->table) < 0) return -1;
    if (new_run(&self->run, &self->table, 1) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void
StepReader_dealloc(StepReader *self)
{
    free_run(&self->run);
    PyMem_Free(self->table.fields);
    Py_XDECREF(self->table_object);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
ready(StepReader *self)
{
    if (self->run.columns != NULL) return 0;
    PyErr_SetString(PyExc_ValueError, "StepReader was not given a table");
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Steps ahead: an interleaved console's next block grouped into its rank streams (blocks.h) and each stream's      */
/* run of step lines read from its first, on a thread of its own that never takes the interpreter, while the        */
/* block before is parsed; StepReader.read takes such a run whole for the stream it is asked to read.               */

typedef struct {
    Run run;
    Py_ssize_t taken; /* the lines read into the run from the stream's first on; 0: nothing to take */
} Stream;

typedef struct {
    PyObject_HEAD
    Py_buffer data;
    int has_data;
    PyObject *reader; /* the StepReader whose table the streams are read by (a reference) */
    Py_buffer arguments[4]; /* group_lines' literal, tag_open, tag_close, loose_starts */
    Py_ssize_t held;
    Groups *groups;
    Stream *streams; /* one a group */
    int failed; /* memory ran out: no group, no stream */
    Worker worker; /* the grouping and the streams' runs */
} StepsAhead;

static PyTypeObject StepsAheadType;
static PyTypeObject StepReaderType;

static void
read_streams(StepsAhead *self)
{
    const Table *table = &((StepReader *)self->reader)->table;
    Groups *groups = self->groups;
    const uint8_t *data = self->data.buf, *data_end = data + self->data.len;
    if (find_groups(self->data.buf, self->data.len, &self->arguments[0], &self->arguments[1], &self->arguments[2],
                    &self->arguments[3], groups) < 0) {
        self->failed = 1;
        return;
    }
    if (groups->overflow) return;
    self->streams = PyMem_RawCalloc((size_t)groups->groups + 1, sizeof(Stream));
    if (self->streams == NULL) {
        self->failed = 1;
        return;
    }
    for (Py_ssize_t group = 0; group < groups->groups; group++) {
        Stream *stream = &self->streams[group];
        const Offsets *starts = &groups->starts[group];
        if (new_run(&stream->run, table, 0) < 0 || reserve_lines(&stream->run, starts->count) < 0) continue;
        Py_ssize_t taken = 0;
        for (; taken < starts->count; taken++) {
            const uint8_t *line = data + starts->items[taken];
            int ascii;
            const uint8_t *end = line_end(line, data_end, &ascii);
            int read = read_line(&stream->run, line, end, ascii);
            if (read == 1) continue;
            if (read != 0) taken = 0; /* memory, or a line float() reads whose named values are in part in the run */
            break;
        }
        stream->taken = taken;
    }
}

static void *
StepsAhead_thread(void *argument)
{
    read_streams(argument);
    return NULL;
}

static void
StepsAhead_clear(StepsAhead *self)
{
    worker_join(&self->worker);
    self->worker = (Worker){0};
    for (Py_ssize_t group = 0; self->streams && group < self->groups->groups; group++) {
        free_run(&self->streams[group].run);
    }
    PyMem_RawFree(self->streams);
    self->streams = NULL;
    if (self->groups) groups_free(self->groups);
    PyMem_RawFree(self->groups);
    self->groups = NULL;
    for (Py_ssize_t i = 0; i < self->held; i++) PyBuffer_Release(&self->arguments[i]);
    self->held = 0;
    if (self->has_data) PyBuffer_Release(&self->data);
    self->has_data = self->failed = 0;
    if (self->reader) ((StepReader *)self->reader)->jobs--;
    Py_CLEAR(self->reader);
}

static int
StepsAhead_init(StepsAhead *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"data", "reader", "literal", "tag_open", "tag_close", "loose_starts", NULL};
    PyObject *data, *reader, *arguments[4];
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!OOOO", keywords, &data, &StepReaderType, &reader, &arguments[0],
                                     &arguments[1], &arguments[2], &arguments[3])) {
        return -1;
    }
    StepsAhead_clear(self);
    if (((StepReader *)reader)->run.columns == NULL) {
        PyErr_SetString(PyExc_ValueError, "StepReader was not given a table");
        return -1;
    }
    self->reader = Py_NewRef(reader);
    ((StepReader *)reader)->jobs++;
    if (PyObject_GetBuffer(data, &self->data, PyBUF_SIMPLE) < 0) return -1;
    self->has_data = 1;
    for (; self->held < 4; self->held++) {
        if (PyObject_GetBuffer(arguments[self->held], &self->arguments[self->held], PyBUF_SIMPLE) < 0) return -1;
    }
    if (check_group_arguments(&self->arguments[1], &self->arguments[2]) < 0) return -1;
    self->groups = PyMem_RawCalloc(1, sizeof(Groups));
    if (self->groups == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    worker_start(&self->worker, StepsAhead_thread, self);
    return 0;
}

PyDoc_STRVAR(StepsAhead_groups_doc,
"groups() -> what group_lines(data, literal, tag_open, tag_close, loose_starts) returns\n\n"
"Waits for the thread (the interpreter free meanwhile).");

static PyObject *
StepsAhead_groups(StepsAhead *self, PyObject *unused)
{
    if (self->groups == NULL) {
        PyErr_SetString(PyExc_ValueError, "StepsAhead was not given a block");
        return NULL;
    }
    worker_wait(&self->worker);
    if (self->failed) return PyErr_NoMemory();
    return groups_result(self->groups);
}

static void
StepsAhead_dealloc(StepsAhead *self)
{
    StepsAhead_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
StepsAhead_get_pending(StepsAhead *self, void *closure)
{
    worker_wait(&self->worker);
    Py_ssize_t pending = 0;
    for (Py_ssize_t group = 0; self->streams && group < self->groups->groups; group++) {
        pending += self->streams[group].taken > 0;
    }
    return PyLong_FromSsize_t(pending);
}

static PyMethodDef StepsAhead_methods[] = {
    {"groups", (PyCFunction)StepsAhead_groups, METH_NOARGS, StepsAhead_groups_doc},
    {NULL},
};

static PyGetSetDef StepsAhead_getset[] = {
    {"pending", (getter)StepsAhead_get_pending, NULL, "How many streams' runs were read and are not taken yet (waits).",
     NULL},
    {NULL},
};

static PyTypeObject StepsAheadType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "exporter.native._step_fields.StepsAhead",
    .tp_doc = PyDoc_STR("StepsAhead(data, reader, literal, tag_open, tag_close, loose_starts): a block's lines grouped "
                        "by prefix and each group's run of step lines read by the reader's table, on a thread of its "
                        "own; StepReader.read(..., ahead) takes a group's run."),
    .tp_basicsize = sizeof(StepsAhead),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)StepsAhead_init,
    .tp_dealloc = (destructor)StepsAhead_dealloc,
    .tp_methods = StepsAhead_methods,
    .tp_getset = StepsAhead_getset,
};

/* The line starts StepReader.read is given: a list of ints, or an array of int64 (native.group_lines' starts) read
 * through its buffer. */
typedef struct {
    PyObject *list;
    Py_buffer view;
    const int64_t *items; /* the array's, NULL for a list */
    Py_ssize_t count;
} Starts;

/* 0, or -1 with TypeError when ``object`` is neither. */
static int
starts_of(PyObject *object, Starts *starts)
{
    *starts = (Starts){0};
    if (PyList_Check(object)) {
        starts->list = object;
        starts->count = PyList_GET_SIZE(object);
        return 0;
    }
    if (typed_view(object, &starts->view, "ql", (Py_ssize_t)sizeof(int64_t))) {
        starts->items = starts->view.buf;
        starts->count = starts->view.len / (Py_ssize_t)sizeof(int64_t);
        return 0;
    }
    PyErr_SetString(PyExc_TypeError, "starts are a list of ints or an array of int64");
    return -1;
}

/* The start at ``index`` (< count); -1 with an exception when a list's item is no int. */
static Py_ssize_t
start_at(const Starts *starts, Py_ssize_t index)
{
    return starts->items ? (Py_ssize_t)starts->items[index] : PyLong_AsSsize_t(PyList_GET_ITEM(starts->list, index));
}

static void
starts_release(Starts *starts)
{
    if (starts->items) PyBuffer_Release(&starts->view);
    *starts = (Starts){0};
}

/* The run ``ahead`` read for the stream whose lines start at ``starts`` (all of them, from ``data``'s buffer), into
 * ``self``'s empty run: how many lines it holds (0: none to take, at most ``limit``), -1 with an exception. */
static Py_ssize_t
take_stream(StepReader *self, StepsAhead *ahead, const Py_buffer *data, const Starts *starts, Py_ssize_t limit)
{
    Py_ssize_t count = starts->count;
    if (ahead->groups == NULL || self->run.count || self->run.named_count || count == 0
        || ((StepReader *)ahead->reader)->table_object != self->table_object || ahead->data.buf != data->buf
        || ahead->data.len != data->len) {
        return 0;
    }
    worker_wait(&ahead->worker);
    if (ahead->failed || ahead->streams == NULL) return 0;
    Py_ssize_t first = start_at(starts, 0);
    if (first == -1 && PyErr_Occurred()) return -1;
    for (Py_ssize_t group = 0; group < ahead->groups->groups; group++) {
        const Offsets *offsets = &ahead->groups->starts[group];
        Stream *stream = &ahead->streams[group];
        if (offsets->count != count || offsets->items[0] != first || stream->taken == 0 || stream->taken > limit) continue;
        if (starts->items) { /* the group's own starts, as group_lines gave them */
            if (memcmp(starts->items, offsets->items, (size_t)count * sizeof(int64_t)) != 0) return 0;
        }
        for (Py_ssize_t i = 1; !starts->items && i < count; i++) {
            Py_ssize_t start = start_at(starts, i);
            if (start == -1 && PyErr_Occurred()) return -1;
            if (start != offsets->items[i]) return 0;
        }
        Run empty = self->run;
        self->run = stream->run;
        stream->run = empty;
        self->run.table = &self->table;
        self->run.interpreter = 1;
        stream->run.table = &((StepReader *)ahead->reader)->table;
        stream->run.interpreter = 0;
        Py_ssize_t taken = stream->taken;
        stream->taken = 0;
        return taken;
    }
    return 0;
}

PyDoc_STRVAR(StepReader_read_doc,
"read(data, starts, index, limit, ahead=None) -> int\n\n"
"Read the run of step lines of ``data`` starting at ``starts[index]``, ``starts[index + 1]``, ...\n"
"(at most ``limit``); how many lines were read. See exporter/native/step_fields.py. ``ahead``: a StepsAhead\n"
"over ``data`` whose run of a group holding just these starts is taken whole (an empty run, index 0).");

static PyObject *
StepReader_read(StepReader *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (ready(self) < 0) return NULL;
    if (nargs < 4 || nargs > 5 || (nargs == 5 && args[4] != Py_None && !PyObject_TypeCheck(args[4], &StepsAheadType))) {
        PyErr_SetString(PyExc_TypeError, "read(data, starts, index, limit, ahead: StepsAhead | None = None)");
        return NULL;
    }
    Py_ssize_t index = PyLong_AsSsize_t(args[2]);
    if (index == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t limit = PyLong_AsSsize_t(args[3]);
    if (limit == -1 && PyErr_Occurred()) return NULL;
    if (index < 0 || limit < 0) {
        PyErr_SetString(PyExc_ValueError, "index and limit must not be negative");
        return NULL;
    }
    Starts starts;
    if (starts_of(args[1], &starts) < 0) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        starts_release(&starts);
        return NULL;
    }
    const uint8_t *data = view.buf, *data_end = data + view.len;
    Py_ssize_t taken = 0;
    if (nargs == 5 && args[4] != Py_None && index == 0) { /* the stream's run read ahead, taken whole */
        taken = take_stream(self, (StepsAhead *)args[4], &view, &starts, limit);
        if (taken < 0) goto error;
    }
    for (Py_ssize_t i = index + taken; i < starts.count && taken < limit; i++, taken++) {
        Py_ssize_t start = start_at(&starts, i);
        if (start == -1 && PyErr_Occurred()) goto error;
        if (start < 0 || start > view.len) break;
        int ascii;
        const uint8_t *end = line_end(data + start, data_end, &ascii);
        int read = read_line(&self->run, data + start, end, ascii);
        if (read < 0) {
            if (!PyErr_Occurred()) PyErr_NoMemory();
            goto error;
        }
        if (read == 0) break;
    }
    if (settle_run(&self->run) < 0) goto error;
    PyBuffer_Release(&view);
    starts_release(&starts);
    return PyLong_FromSsize_t(taken);
error:
    {
        /* No value left pointing into the data released here. */
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        if (settle_run(&self->run) < 0) PyErr_Clear();
        PyErr_Restore(type, value, traceback);
    }
    PyBuffer_Release(&view);
    starts_release(&starts);
    return NULL;
}

PyDoc_STRVAR(StepReader_take_doc,
"take() -> (steps, total, fields, named)\n\n"
"What the reads since the last take found, as one run; the reader starts over.");

static PyObject *
StepReader_take(StepReader *self, PyObject *unused)
{
    if (ready(self) < 0) return NULL;
    PyObject *result = run_result(&self->run);
    if (result != NULL) clear_run(&self->run);
    return result;
}

static Py_ssize_t
StepReader_length(StepReader *self)
{
    return self->run.count;
}

static PyMethodDef StepReader_methods[] = {
    {"read", (PyCFunction)(void (*)(void))StepReader_read, METH_FASTCALL, StepReader_read_doc},
    {"take", (PyCFunction)StepReader_take, METH_NOARGS, StepReader_take_doc},
    {NULL},
};

static PySequenceMethods StepReader_as_sequence = {
    .sq_length = (lenfunc)StepReader_length,
};

static PyTypeObject StepReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "exporter.native._step_fields.StepReader",
    .tp_doc = PyDoc_STR("StepReader(table): runs of step lines read by a field table, taken as one."),
    .tp_basicsize = sizeof(StepReader),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)StepReader_init,
    .tp_dealloc = (destructor)StepReader_dealloc,
    .tp_methods = StepReader_methods,
    .tp_as_sequence = &StepReader_as_sequence,
};

/* ------------------------------------------------------------------------------------------ */
/* Rows out: step_fields.py's write_rows                                                      */

typedef struct {
    char *at;
    Py_ssize_t length, capacity;
} Text_out;

static int
reserve(Text_out *out, Py_ssize_t more)
{
    /* The caller tells a failure (write_rows: as no memory, after any error of its own). */
    if (out->length + more <= out->capacity) return 0;
    Py_ssize_t wanted = out->capacity * 2 > out->length + more ? out->capacity * 2 : out->length + more;
    char *grown = PyMem_RawRealloc(out->at, (size_t)wanted); /* the writer's thread holds no interpreter */
    if (grown == NULL) return -1;
    out->at = grown;
    out->capacity = wanted;
    return 0;
}

static int
write_text(Text_out *out, const char *text, Py_ssize_t length)
{
    if (length == 0) return 0; /* an empty lead: no buffer yet, and memcpy takes none */
    if (reserve(out, length) < 0) return -1;
    memcpy(out->at + out->length, text, (size_t)length);
    out->length += length;
    return 0;
}

/* The decimal digits of ``number`` into ``digits`` (20 bytes at least): how many. Two at a time from a table of
 * the pairs, the last first: a float's 17 digits are a third of writing it. */
static int
digits_of(uint64_t number, char *digits)
{
    static const char pairs[201] =
        "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
        "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
        "8081828384858687888990919293949596979899";
    char reversed[20];
    int at = 20;
    while (number >= 100) {
        unsigned pair = (unsigned)(number % 100);
        number /= 100;
        at -= 2;
        memcpy(reversed + at, pairs + 2 * pair, 2);
    }
    if (number >= 10) {
        at -= 2;
        memcpy(reversed + at, pairs + 2 * number, 2);
    }
    else reversed[--at] = (char)('0' + number);
    memcpy(digits, reversed + at, (size_t)(20 - at));
    return 20 - at;
}

/* With ``j`` digits after the point the candidates for x = m * 2**e are the integers next to x * 10**j = m * 5**j *
 * 2**(j + e), exact in 128 bits for j <= 27; one reads back as x when it lies within half an ulp of x: 5**j / 2 in
 * units of 2**-(j + e), half that below a power of two, whose lower neighbour is nearer. 1 when one does, with the
 * one repr writes: the nearest, of two halfway the even one (as repr's rounding does: a float32's value one digit
 * short of its exact decimal often is). */
#ifdef __SIZEOF_INT128__
static int
decimal_reads_back(uint64_t mantissa, int exponent, int power_of_two, int j, uint64_t *candidate)
{
    static const uint64_t fives[28] = {
        1ULL, 5ULL, 25ULL, 125ULL, 625ULL, 3125ULL, 15625ULL, 78125ULL, 390625ULL, 1953125ULL, 9765625ULL,
        48828125ULL, 244140625ULL, 1220703125ULL, 6103515625ULL, 30517578125ULL, 152587890625ULL,
        762939453125ULL, 3814697265625ULL, 19073486328125ULL, 95367431640625ULL, 476837158203125ULL,
        2384185791015625ULL, 11920928955078125ULL, 59604644775390625ULL, 298023223876953125ULL,
        1490116119384765625ULL, 7450580596923828125ULL};
    int shift = -(j + exponent);
    unsigned __int128 scaled = (unsigned __int128)mantissa * fives[j];
    if (shift <= 0) { /* x * 10**j is an integer */
        *candidate = (uint64_t)(scaled << -shift);
        return 1;
    }
    unsigned __int128 unit = (unsigned __int128)1 << shift, down = scaled & (unit - 1), up = unit - down;
    uint64_t below = (uint64_t)(scaled >> shift);
    int down_reads = below != 0 && (power_of_two ? 4 * down : 2 * down) < fives[j];
    int up_reads = 2 * up < fives[j];
    if (down == up && down_reads && up_reads) *candidate = below + (below & 1); /* halfway: the even one */
    else if (down_reads && (down < up || !up_reads)) *candidate = below;
    else if (up_reads) *candidate = below + 1;
    return down_reads || up_reads;
}
#endif

/* The shortest decimal that reads back as ``x`` (finite, > 0), as repr writes it, when x = m * 2**e is normal,
 * below 2**53 and at least 1e-10 (what trainers print): 1 with its digits as an integer and how many of them follow
 * the point. If some candidate reads back at j digits after the point (decimal_reads_back), one does at every j after
 * it (the same one with a zero more), so the fewest are found by a search: first down from the most a double needs
 * (a float a trainer prints, a float32's widened or a quotient, mostly needs 16 or 17 digits: two looks), then by
 * bisection below. 0: x out of that range, for repr's own algorithm. */
static int
short_decimal(double x, uint64_t *digits, int *fraction)
{
#ifndef __SIZEOF_INT128__
    (void)x, (void)digits, (void)fraction;
    return 0;
#else
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    int biased = (int)(bits >> 52 & 0x7ff);
    if (biased == 0 || x >= 9007199254740992.0 || x < 1e-10) return 0;
    uint64_t mantissa = (bits & 0xfffffffffffffULL) | 1ULL << 52;
    int exponent = biased - 1075, power_of_two = mantissa == 1ULL << 52;
    /* x >= 10**decimal, so 17 digits (or 18) follow the point at j = 16 - decimal: those always read back */
    int decimal = (int)floor((exponent + 52) * 0.30102999566398120);
    int low = 0, high = 16 - decimal < 0 ? 0 : 16 - decimal;
    if (high > 27) return 0;
    uint64_t found = 0, candidate = 0;
    int found_at = -1;
    for (int top = high, j = top - 1; j >= low && j >= top - 2; j--) { /* one digit fewer than the most, two */
        if (!decimal_reads_back(mantissa, exponent, power_of_two, j, &candidate)) {
            low = j + 1; /* none at j: none below it either */
            break;
        }
        found = candidate;
        found_at = j;
        high = j - 1;
    }
    while (low <= high) {
        int j = (low + high) / 2;
        if (decimal_reads_back(mantissa, exponent, power_of_two, j, &candidate)) {
            found = candidate;
            found_at = j;
            high = j - 1;
        }
        else low = j + 1;
    }
    if (found_at < 0) return 0;
    *digits = found;
    *fraction = found_at;
    return 1;
#endif
}

/* repr(x) of a float, as float.__repr__ writes it; NEEDS_INTERPRETER without ``interpreter`` where that takes
 * Python's own algorithm (x beyond short_decimal's range). */
static int
write_float(Text_out *out, double x, int interpreter)
{
    uint64_t number = 0;
    int fraction = 0;
    if (isnan(x)) return write_text(out, "nan", 3);
    if (isinf(x)) return x > 0 ? write_text(out, "inf", 3) : write_text(out, "-inf", 4);
    if (!(x == 0 || short_decimal(fabs(x), &number, &fraction))) {
        if (!interpreter) return NEEDS_INTERPRETER;
        char *text = PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
        if (text == NULL) return -1;
        int written = write_text(out, text, (Py_ssize_t)strlen(text));
        PyMem_Free(text);
        return written;
    }
    if (reserve(out, 32) < 0) return -1;
    char *at = out->at + out->length, *start = at;
    if (signbit(x)) *at++ = '-';
    if (x == 0) {
        memcpy(at, "0.0", 3);
        out->length += at + 3 - start;
        return 0;
    }
    char digits[20];
    int count = digits_of(number, digits);
    int point = count - fraction; /* digits before the point: repr's decpt */
    if (point <= -4 || point > 16) { /* d[.ddd]e[+-]XX */
        *at++ = digits[0];
        if (count > 1) {
            *at++ = '.';
            memcpy(at, digits + 1, (size_t)count - 1);
            at += count - 1;
        }
        int power = point - 1;
        *at++ = 'e';
        *at++ = power < 0 ? '-' : '+';
        power = abs(power);
        if (power < 10) *at++ = '0';
        char exponent[20];
        int length = digits_of((uint64_t)power, exponent);
        memcpy(at, exponent, (size_t)length);
        at += length;
    }
    else if (point <= 0) { /* 0.000ddd */
        memcpy(at, "0.", 2);
        at += 2;
        memset(at, '0', (size_t)-point);
        at += -point;
        memcpy(at, digits, (size_t)count);
        at += count;
    }
    else if (point < count) { /* dd.ddd */
        memcpy(at, digits, (size_t)point);
        at += point;
        *at++ = '.';
        memcpy(at, digits + point, (size_t)(count - point));
        at += count - point;
    }
    else { /* ddd.0: an integer's digits are all there (no fraction digits) */
        memcpy(at, digits, (size_t)count);
        at += count;
        memcpy(at, ".0", 2);
        at += 2;
    }
    out->length += at - start;
    return 0;
}

/* A cell as its job read it from its column: a float's value, an int's within 64 bits, None, or an int beyond them
 * (a reference held: only its repr() writes it). */
enum { CELL_NONE, CELL_REAL, CELL_WHOLE, CELL_OBJECT };
typedef struct {
    union {
        double real;
        long long whole;
        PyObject *object;
    } value;
    int kind;
} Cell;

/* A cell: repr of an int or a float, nothing for None. Without ``interpreter`` (the writer's own thread):
 * NEEDS_INTERPRETER where repr() has to be called. */
static int
write_cell(Text_out *out, const Cell *cell, int interpreter)
{
    if (cell->kind == CELL_REAL) return write_float(out, cell->value.real, interpreter);
    if (cell->kind == CELL_NONE) return 0;
    if (cell->kind == CELL_WHOLE) {
        long long number = cell->value.whole;
        char digits[24];
        int negative = number < 0;
        int count = digits_of(negative ? 0 - (uint64_t)number : (uint64_t)number, digits + 1);
        if (negative) digits[0] = '-';
        return write_text(out, digits + !negative, count + negative);
    }
    if (!interpreter) return NEEDS_INTERPRETER;
    PyObject *text = PyObject_Repr(cell->value.object);
    if (text == NULL) return -1;
    Py_ssize_t length;
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &length);
    int written = utf8 == NULL ? -1 : write_text(out, utf8, length);
    Py_DECREF(text);
    return written;
}

/* One job of write_rows: a text (UTF-8 of a str of the jobs) or the rows of columns, each after a lead. */
typedef struct {
    const char *text, *lead;
    Py_ssize_t length, lead_length, rows, width;
    /* The columns' cells as the job was read, column after column (rows each): no Python object is read after,
     * and the columns' numbers are freed with their lists, not by the writing. */
    Cell *cells;
    Py_ssize_t objects; /* cells of CELL_OBJECT (a reference each) */
} Job;

static void
free_cells(Job *job)
{
    if (job->cells == NULL) return;
    for (Py_ssize_t i = 0; job->objects && i < job->rows * job->width; i++) {
        if (job->cells[i].kind == CELL_OBJECT) Py_DECREF(job->cells[i].value.object);
    }
    PyMem_Free(job->cells);
    job->cells = NULL;
    job->objects = 0;
}

/* A column's first ``rows`` items into ``cells``: -1 with an exception when one is no int, float or None. */
static int
read_cells(Job *job, PyObject *const *items, Py_ssize_t rows, Cell *cells)
{
    for (Py_ssize_t row = 0; row < rows; row++) {
        PyObject *value = items[row];
        Cell *cell = &cells[row];
        if (PyFloat_CheckExact(value)) {
            cell->kind = CELL_REAL;
            cell->value.real = PyFloat_AS_DOUBLE(value);
        }
        else if (value == Py_None) cell->kind = CELL_NONE;
        else if (PyLong_CheckExact(value)) {
            int overflow; /* an exact int: no __index__ is called, no exception is set */
            long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
            if (overflow) {
                cell->kind = CELL_OBJECT;
                cell->value.object = Py_NewRef(value);
                job->objects++;
            }
            else {
                cell->kind = CELL_WHOLE;
                cell->value.whole = number;
            }
        }
        else {
            PyErr_Format(PyExc_TypeError, "write_rows: a cell is an int, a float or None, not %.100s",
                         Py_TYPE(value)->tp_name);
            return -1;
        }
    }
    return 0;
}

/* A column that is an array('d') (a series the step kernel read) into ``rows`` cells from its buffer: 1, 0 when the
 * column is no such array, -1 with an exception (fewer than ``rows`` values). */
static int
read_double_cells(PyObject *column, Py_ssize_t rows, Cell *cells)
{
    Py_buffer view;
    if (!doubles_view(column, &view)) return 0;
    int read = 1;
    if (view.len / (Py_ssize_t)sizeof(double) < rows) {
        PyErr_SetString(PyExc_ValueError, "write_rows: each column a list of rows items at least");
        read = -1;
    }
    for (Py_ssize_t row = 0; read == 1 && row < rows; row++) {
        cells[row].kind = CELL_REAL;
        cells[row].value.real = ((const double *)view.buf)[row];
    }
    PyBuffer_Release(&view);
    return read;
}

/* A column that is a range (a run's steps one difference apart) into ``rows`` cells, each step computed: 1, 0 when
 * the column is no range or its first or last step is beyond 64 bits (read item by item), -1 with an exception
 * (fewer than ``rows`` steps). */
static int
read_range_cells(PyObject *column, Py_ssize_t rows, Cell *cells)
{
    if (!PyRange_Check(column)) return 0;
    Py_ssize_t count = PyObject_Size(column);
    if (count < 0) return -1;
    if (count < rows) {
        PyErr_SetString(PyExc_ValueError, "write_rows: each column a list of rows items at least");
        return -1;
    }
    if (rows == 0) return 1;
    PyObject *ends[2] = {PySequence_GetItem(column, 0), PySequence_GetItem(column, rows - 1)};
    PyObject *step = PyObject_GetAttrString(column, "step");
    int beyond[3] = {0};
    long long first = ends[0] ? PyLong_AsLongLongAndOverflow(ends[0], &beyond[0]) : -1;
    if (ends[1]) (void)PyLong_AsLongLongAndOverflow(ends[1], &beyond[1]);
    long long difference = step ? PyLong_AsLongLongAndOverflow(step, &beyond[2]) : -1;
    Py_XDECREF(ends[0]);
    Py_XDECREF(ends[1]);
    Py_XDECREF(step);
    if (ends[0] == NULL || ends[1] == NULL || step == NULL || PyErr_Occurred()) return -1;
    if (beyond[0] || beyond[1] || (beyond[2] && rows > 1)) return 0;
    /* Every step between two within 64 bits is too: computed unsigned, it wraps to its value. */
    for (Py_ssize_t row = 0; row < rows; row++) {
        cells[row].kind = CELL_WHOLE;
        cells[row].value.whole = (long long)((uint64_t)first + (uint64_t)row * (uint64_t)difference);
    }
    return 1;
}

/* A job of the rows (columns, rows, lead): its cells read and every cell's type checked, -1 with an exception for
 * bad arguments. Writing it runs no Python code and reads no Python object but its lead. */
static int
read_rows_job(PyObject *item, Job *job)
{
    PyObject *columns_given, *rows_given, *lead_given;
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
        PyErr_SetString(PyExc_TypeError, "write_rows: a job is a str or (columns: tuple, rows, lead: str)");
        return -1;
    }
    columns_given = PyTuple_GET_ITEM(item, 0);
    rows_given = PyTuple_GET_ITEM(item, 1);
    lead_given = PyTuple_GET_ITEM(item, 2);
    if (!PyTuple_Check(columns_given) || !PyUnicode_Check(lead_given)) {
        PyErr_SetString(PyExc_TypeError, "write_rows: a job is a str or (columns: tuple, rows, lead: str)");
        return -1;
    }
    job->lead = PyUnicode_AsUTF8AndSize(lead_given, &job->lead_length);
    if (job->lead == NULL) return -1;
    Py_ssize_t rows = PyLong_AsSsize_t(rows_given), width = PyTuple_GET_SIZE(columns_given);
    if (rows == -1 && PyErr_Occurred()) return -1;
    if (rows < 0 || width == 0) rows = 0; /* no columns: no rows (as zip gives none) */
    if (rows > PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(Cell) / (width ? width : 1)) {
        PyErr_NoMemory();
        return -1;
    }
    job->cells = PyMem_Calloc((size_t)(rows * width) + 1, sizeof(Cell));
    if (job->cells == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    job->rows = rows;
    job->width = width;
    for (Py_ssize_t i = 0; i < width; i++) { /* a list as it is now: it may change once the call returns */
        int read = read_double_cells(PyTuple_GET_ITEM(columns_given, i), rows, job->cells + i * rows);
        if (read == 0) read = read_range_cells(PyTuple_GET_ITEM(columns_given, i), rows, job->cells + i * rows);
        if (read < 0) return -1;
        if (read == 1) continue;
        PyObject *column = PySequence_Fast(PyTuple_GET_ITEM(columns_given, i), "write_rows: a column is a sequence");
        if (column == NULL) return -1;
        read = -1;
        if (PySequence_Fast_GET_SIZE(column) < rows) {
            PyErr_SetString(PyExc_ValueError, "write_rows: each column a list of rows items at least");
        }
        else read = read_cells(job, PySequence_Fast_ITEMS(column), rows, job->cells + i * rows);
        Py_DECREF(column);
        if (read < 0) return -1;
    }
    return 0;
}

/* A call's jobs and how far writing them got: write_rows writes them at once; RowsAhead on a thread of its own,
 * which hands what only the interpreter writes (repr's own cases) back to wait(). */
typedef struct {
    PyObject *items; /* a tuple of the jobs as given: their texts are theirs */
    Job *jobs;
    Py_ssize_t count, job, row; /* jobs[job]'s rows from ``row`` are yet to be written */
    Text_out out;
    int fd;
    int error;       /* an errno of write(2) */
    int no_memory;   /* the buffer could not grow */
    int interpreter; /* stopped where a cell needs it (NEEDS_INTERPRETER) */
} Writing;

static int
write_out(Writing *writing)
{
    Text_out *out = &writing->out;
    const char *at = out->at;
    Py_ssize_t left = out->length;
    while (left > 0) {
        ssize_t written = write(writing->fd, at, (size_t)left);
        if (written < 0) {
            if (errno == EINTR) continue;
            writing->error = errno;
            return -1;
        }
        at += written;
        left -= written;
    }
    out->length = 0;
    return 0;
}

/* The jobs from where writing got to: 0 when all are written, -1 when it failed (error or no_memory, or an
 * exception with ``interpreter``), NEEDS_INTERPRETER without it at a cell that needs it (the row is taken back,
 * to be written whole by a call with the interpreter). */
static int
write_jobs(Writing *writing, int interpreter)
{
    Text_out *out = &writing->out;
    for (; writing->job < writing->count; writing->job++, writing->row = 0) {
        const Job *job = &writing->jobs[writing->job];
        if (job->text != NULL) {
            if (write_text(out, job->text, job->length) < 0) goto no_memory;
            continue;
        }
        for (; writing->row < job->rows; writing->row++) {
            Py_ssize_t row = writing->row, row_start = out->length;
            if (write_text(out, job->lead, job->lead_length) < 0) goto no_memory;
            for (Py_ssize_t i = 0; i < job->width; i++) {
                if (i && write_text(out, ",", 1) < 0) goto no_memory;
                int written = write_cell(out, &job->cells[i * job->rows + row], interpreter);
                if (written == NEEDS_INTERPRETER) {
                    out->length = row_start;
                    writing->interpreter = 1;
                    return NEEDS_INTERPRETER;
                }
                if (written < 0) {
                    if (interpreter && PyErr_Occurred()) return -1;
                    goto no_memory;
                }
            }
            if (write_text(out, "\r\n", 2) < 0) goto no_memory;
            if (out->length >= (1 << 20) && write_out(writing) < 0) return -1;
        }
    }
    writing->interpreter = 0;
    return write_out(writing);
no_memory:
    writing->no_memory = 1;
    return -1;
}

/* The jobs of ``given`` read (their cells' types checked) into ``writing``: -1 with an exception when one is bad. */
static int
read_jobs(Writing *writing, PyObject *fd, PyObject *given)
{
    *writing = (Writing){0};
    writing->fd = PyObject_AsFileDescriptor(fd);
    if (writing->fd < 0) return -1;
    writing->items = PySequence_Tuple(given);
    if (writing->items == NULL) return -1;
    Py_ssize_t count = PyTuple_GET_SIZE(writing->items);
    writing->jobs = PyMem_Calloc((size_t)count + 1, sizeof(Job));
    if (writing->jobs == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (; writing->count < count; writing->count++) { /* a failed job's columns are freed with the others */
        PyObject *item = PyTuple_GET_ITEM(writing->items, writing->count);
        Job *job = &writing->jobs[writing->count];
        if (PyUnicode_Check(item)) {
            job->text = PyUnicode_AsUTF8AndSize(item, &job->length);
            if (job->text == NULL) return -1;
        }
        else if (read_rows_job(item, job) < 0) {
            writing->count++;
            return -1;
        }
    }
    return 0;
}

/* What stopped writing as an exception (none set yet); -1 when there is one, else 0. */
static int
writing_failed(Writing *writing)
{
    if (writing->error) {
        errno = writing->error;
        PyErr_SetFromErrno(PyExc_OSError);
    }
    else if (writing->no_memory) PyErr_NoMemory();
    return PyErr_Occurred() ? -1 : 0;
}

static void
writing_free(Writing *writing)
{
    for (Py_ssize_t i = 0; writing->jobs != NULL && i < writing->count; i++) free_cells(&writing->jobs[i]);
    PyMem_Free(writing->jobs);
    PyMem_RawFree(writing->out.at);
    Py_CLEAR(writing->items);
    *writing = (Writing){0};
}

PyDoc_STRVAR(write_rows_doc,
"write_rows(fd, jobs) -> None\n\n"
"Write each job to the file descriptor fd, in order: a str as its UTF-8, or (columns, rows, lead) as the first\n"
"rows rows of columns (sequences of ints, floats, None), each row lead and its cells joined by ',' and ended by\n"
"'\\r\\n', a number as repr() writes it, None as nothing (the csv module's). The jobs are read first (TypeError,\n"
"ValueError: nothing is written); OSError when a write fails.");

static PyObject *
write_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "write_rows(fd: int, jobs: list)");
        return NULL;
    }
    Writing writing;
    int failed = read_jobs(&writing, args[0], args[1]) < 0 || write_jobs(&writing, 1) < 0;
    if (failed) writing_failed(&writing);
    writing_free(&writing);
    if (failed) return NULL;
    Py_RETURN_NONE;
}

/* write_rows on a thread of its own, after the writing it was given to follow (``after``): the writings of one file
 * run ahead of the interpreter several at a time, and still write in the order they were made. */
typedef struct RowsAhead {
    PyObject_HEAD
    Writing writing;
    Worker worker;
    struct RowsAhead *after; /* a reference, dropped by wait(): its thread ended before this one writes */
    pthread_mutex_t lock;
    pthread_cond_t ended_signal;
    int synced; /* lock and ended_signal made */
    int started;
    /* Set by the thread, under the lock, and kept until the next init: the thread's part is over, it wrote every
     * job, or else how it failed (0, 0: it left jobs to wait()). */
    int ended, clean, error, no_memory;
} RowsAhead;

static void *
RowsAhead_thread(void *argument)
{
    RowsAhead *self = argument, *after = self->after;
    Writing *writing = &self->writing;
    int clean = 1;
    if (after != NULL) {
        pthread_mutex_lock(&after->lock);
        while (!after->ended) pthread_cond_wait(&after->ended_signal, &after->lock);
        clean = after->clean;
        if (!clean) { /* its failure is this one's; what it left to wait() comes before any of this one's rows */
            writing->error = after->error;
            writing->no_memory = after->no_memory;
            writing->interpreter = !writing->error && !writing->no_memory;
        }
        pthread_mutex_unlock(&after->lock);
    }
    if (clean) clean = write_jobs(writing, 0) == 0;
    pthread_mutex_lock(&self->lock);
    self->ended = 1;
    self->clean = clean;
    self->error = writing->error;
    self->no_memory = writing->no_memory;
    pthread_cond_broadcast(&self->ended_signal);
    pthread_mutex_unlock(&self->lock);
    return NULL;
}

/* The thread's part over: those of the writings before it first (one that could start no thread runs here). */
static void
RowsAhead_settle(RowsAhead *self)
{
    if (self->after != NULL) RowsAhead_settle(self->after);
    if (self->started) worker_wait(&self->worker);
}

static void
RowsAhead_clear(RowsAhead *self)
{
    RowsAhead_settle(self);
    self->worker = (Worker){0};
    writing_free(&self->writing);
    Py_CLEAR(self->after);
    self->started = 0;
}

static int
RowsAhead_init(RowsAhead *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"fd", "jobs", "after", NULL};
    PyObject *fd, *jobs, *after = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|O", keywords, &fd, &jobs, &after)) return -1;
    if (after != Py_None && !PyObject_TypeCheck(after, Py_TYPE(self))) {
        PyErr_SetString(PyExc_TypeError, "RowsAhead: after is a RowsAhead or None");
        return -1;
    }
    RowsAhead_clear(self);
    if (!self->synced) {
        if (pthread_mutex_init(&self->lock, NULL) != 0) {
            PyErr_NoMemory();
            return -1;
        }
        if (pthread_cond_init(&self->ended_signal, NULL) != 0) {
            pthread_mutex_destroy(&self->lock);
            PyErr_NoMemory();
            return -1;
        }
        self->synced = 1;
    }
    if (read_jobs(&self->writing, fd, jobs) < 0) {
        writing_free(&self->writing);
        return -1;
    }
    self->after = after == Py_None ? NULL : (RowsAhead *)Py_NewRef(after);
    self->started = 1;
    self->ended = self->clean = self->error = self->no_memory = 0;
    worker_start(&self->worker, RowsAhead_thread, self);
    return 0;
}

PyDoc_STRVAR(RowsAhead_wait_doc,
"wait() -> None\n\n"
"Until every job is written, the writing it follows waited for first (the interpreter free meanwhile; a cell only\n"
"repr() writes, and the rest after it, written here); OSError when a write failed, its own or one before it. A\n"
"second wait returns at once.");

static PyObject *
RowsAhead_wait(RowsAhead *self, PyObject *unused)
{
    if (!self->started) Py_RETURN_NONE;
    int failed = 0;
    if (self->after != NULL) { /* what it left to the interpreter is written before this one's rows */
        PyObject *waited = RowsAhead_wait(self->after, NULL);
        failed = waited == NULL;
        Py_XDECREF(waited);
    }
    RowsAhead_settle(self);
    Writing *writing = &self->writing;
    while (!failed && writing->interpreter) failed = write_jobs(writing, 1) < 0;
    failed = (!PyErr_Occurred() && writing_failed(writing) < 0) || failed;
    RowsAhead_clear(self);
    if (failed) return NULL;
    Py_RETURN_NONE;
}

static void
RowsAhead_dealloc(RowsAhead *self)
{
    if (self->started) { /* dropped unwaited: written all the same, its cells only repr() writes included */
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        PyObject *waited = RowsAhead_wait(self, NULL);
        if (waited == NULL) PyErr_WriteUnraisable((PyObject *)self);
        Py_XDECREF(waited);
        PyErr_Restore(type, value, traceback);
    }
    RowsAhead_clear(self);
    if (self->synced) {
        pthread_cond_destroy(&self->ended_signal);
        pthread_mutex_destroy(&self->lock);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef RowsAhead_methods[] = {
    {"wait", (PyCFunction)RowsAhead_wait, METH_NOARGS, RowsAhead_wait_doc},
    {NULL},
};

static PyTypeObject RowsAheadType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "exporter.native._step_fields.RowsAhead",
    .tp_doc = PyDoc_STR("RowsAhead(fd, jobs, after=None): write_rows(fd, jobs) on a thread of its own that never "
                        "takes the interpreter, once the RowsAhead ``after`` has written; the jobs are read (and "
                        "refused) here, wait() ends the writing."),
    .tp_basicsize = sizeof(RowsAhead),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)RowsAhead_init,
    .tp_dealloc = (destructor)RowsAhead_dealloc,
    .tp_methods = RowsAhead_methods,
};

static PyMethodDef step_fields_functions[] = {
    {"write_rows", (PyCFunction)(void (*)(void))write_rows, METH_FASTCALL, write_rows_doc},
    {NULL},
};

static struct PyModuleDef step_fields_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "exporter.native._step_fields",
    .m_doc = "Kernel: runs of step lines read by a field table (twin: exporter/native/step_fields.py).",
    .m_size = -1,
    .m_methods = step_fields_functions,
};

PyMODINIT_FUNC
PyInit__step_fields(void)
{
    if (PyType_Ready(&StepReaderType) < 0 || PyType_Ready(&StepsAheadType) < 0 || PyType_Ready(&RowsAheadType) < 0) {
        return NULL;
    }
    if (import_array_type() < 0) return NULL;
    PyObject *module = PyModule_Create(&step_fields_module);
    if (module == NULL) return NULL;
    if (PyModule_AddObjectRef(module, "StepReader", (PyObject *)&StepReaderType) < 0
        || PyModule_AddObjectRef(module, "StepsAhead", (PyObject *)&StepsAheadType) < 0
        || PyModule_AddObjectRef(module, "RowsAhead", (PyObject *)&RowsAheadType) < 0
        || PyModule_AddIntConstant(module, "KIND_FLOAT", KIND_FLOAT) < 0
        || PyModule_AddIntConstant(module, "KIND_DURATION", KIND_DURATION) < 0
        || PyModule_AddIntConstant(module, "KIND_NUMBER_WITH_UNIT", KIND_NUMBER_WITH_UNIT) < 0
        || PyModule_AddIntConstant(module, "KIND_RECIPROCAL", KIND_RECIPROCAL) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
