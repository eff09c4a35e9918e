/* Native hot path of exporter.parse: the block scan and the MindFormers PyNative step lines.
 *
 * Each function here has a pure-Python twin that defines its behaviour (parse/block.py's
 * AnchorScanner, parse/columns.py's StepColumns); tests/test_speedups.py checks that both give
 * the same results. Catch-up over gigabytes of framework noise is dominated by per-line
 * work: this module does the per-byte and per-step-line work without a Python object per
 * line (docs/benchmarks.md).
 *
 * Scanner: one pass over a block counts its newlines and finds the lines holding any anchor.
 * Candidates come from a SIMD fingerprint test in the manner of Hyperscan's and the Rust
 * aho-corasick crate's "Teddy": each anchor contributes three consecutive bytes (chosen to be
 * rare in log text) to one of eight buckets; per 32 bytes, nibble lookup tables (pshufb) tell
 * which positions may start a fingerprint of which bucket, and only those are verified with
 * memcmp. Without AVX2 the same tables are used one byte at a time.
 */
#define _GNU_SOURCE /* memrchr */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_AVX2_SCAN 1
#endif

#define BUCKETS 8
#define FINGERPRINT 3

/* ------------------------------------------------------------------------------------------ */
/* Scanner                                                                                    */

typedef struct {
    const uint8_t *bytes;
    Py_ssize_t length;
    Py_ssize_t offset; /* where the fingerprint starts inside the anchor */
    uint32_t fingerprint; /* its bytes, as load_fingerprint reads them */
} Anchor;

typedef struct {
    PyObject_HEAD
    PyObject *anchors;       /* tuple of bytes, kept alive: Anchor.bytes points into them */
    PyObject *line_starts;   /* tuple of bytes: reported when a line begins with one */
    Anchor *table;
    Py_ssize_t count;
    Py_ssize_t *members[BUCKETS]; /* anchor indexes per bucket */
    Py_ssize_t member_count[BUCKETS];
    uint8_t exact[FINGERPRINT][256];            /* bucket bits per fingerprint byte */
    uint8_t low[FINGERPRINT][32], high[FINGERPRINT][32]; /* nibble tables, both AVX2 lanes */
} Scanner;

/* How common a byte is in log text, roughly: a fingerprint is chosen to minimise the product. */
static int
commonness(uint8_t byte)
{
    if (byte >= 'a' && byte <= 'z') return strchr("etaoinsrlhcdmup", byte) ? 50 : 25;
    if (byte >= '0' && byte <= '9' ) return 30;
    if (byte == ' ') return 50;
    if (byte && strchr(".:/_,()-", byte)) return 20;
    if (byte == '[' || byte == ']') return 12;
    if (byte >= 'A' && byte <= 'Z') return strchr("EINOTRSAD", byte) ? 10 : 5;
    if (byte && strchr("=\"'{}<>*+%#\t", byte)) return 5;
    return 2;
}

static inline uint32_t
load_fingerprint(const uint8_t *at)
{
    return (uint32_t)at[0] | (uint32_t)at[1] << 8 | (uint32_t)at[2] << 16;
}

static Py_ssize_t
rarest_offset(const uint8_t *bytes, Py_ssize_t length)
{
    Py_ssize_t best = 0;
    double best_score = 0;
    for (Py_ssize_t offset = 0; offset + FINGERPRINT <= length; offset++) {
        double score = 1;
        for (int i = 0; i < FINGERPRINT; i++) score *= commonness(bytes[offset + i]);
        if (offset == 0 || score < best_score) {
            best = offset;
            best_score = score;
        }
    }
    return best;
}

/* A bucket's nibble tables match every byte whose low nibble and high nibble each belong to
 * one of its fingerprints: the more combinations, and the more common their bytes, the more
 * positions are candidates for nothing. */
typedef struct {
    uint16_t low[FINGERPRINT], high[FINGERPRINT]; /* nibble sets */
    int alive;
} Group;

static double
group_cost(const Group *group)
{
    double cost = 1;
    for (int i = 0; i < FINGERPRINT; i++) {
        double matched = 0;
        for (int byte = 0; byte < 256; byte++) {
            if ((group->low[i] >> (byte & 15) & 1) && (group->high[i] >> (byte >> 4) & 1)) matched += commonness((uint8_t)byte);
        }
        cost *= matched;
    }
    return cost;
}

static Group
merged(const Group *a, const Group *b)
{
    Group both = {.alive = 1};
    for (int i = 0; i < FINGERPRINT; i++) {
        both.low[i] = a->low[i] | b->low[i];
        both.high[i] = a->high[i] | b->high[i];
    }
    return both;
}

/* Bucket of each anchor: groups merged greedily, cheapest merge first, until BUCKETS remain. */
static int
assign_buckets(const Anchor *table, Py_ssize_t count, int *bucket_of)
{
    Group *groups = PyMem_Calloc(count, sizeof(Group));
    double *cost = PyMem_Calloc(count, sizeof(double));
    Py_ssize_t *group_of = PyMem_Calloc(count, sizeof(Py_ssize_t));
    double *delta = PyMem_Calloc((size_t)count * count, sizeof(double));
    if (!groups || !cost || !group_of || !delta) {
        PyMem_Free(groups);
        PyMem_Free(cost);
        PyMem_Free(group_of);
        PyMem_Free(delta);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t a = 0; a < count; a++) {
        groups[a].alive = 1;
        for (int i = 0; i < FINGERPRINT; i++) {
            uint8_t byte = table[a].bytes[table[a].offset + i];
            groups[a].low[i] = (uint16_t)(1u << (byte & 15));
            groups[a].high[i] = (uint16_t)(1u << (byte >> 4));
        }
        cost[a] = group_cost(&groups[a]);
        group_of[a] = a;
    }
    for (Py_ssize_t a = 0; a < count; a++) {
        for (Py_ssize_t b = a + 1; b < count; b++) {
            Group both = merged(&groups[a], &groups[b]);
            delta[a * count + b] = group_cost(&both) - cost[a] - cost[b];
        }
    }
    for (Py_ssize_t alive = count; alive > BUCKETS; alive--) {
        Py_ssize_t best_a = -1, best_b = -1;
        for (Py_ssize_t a = 0; a < count; a++) {
            if (!groups[a].alive) continue;
            for (Py_ssize_t b = a + 1; b < count; b++) {
                if (groups[b].alive && (best_a < 0 || delta[a * count + b] < delta[best_a * count + best_b])) {
                    best_a = a;
                    best_b = b;
                }
            }
        }
        groups[best_a] = merged(&groups[best_a], &groups[best_b]);
        groups[best_b].alive = 0;
        cost[best_a] = group_cost(&groups[best_a]);
        for (Py_ssize_t anchor = 0; anchor < count; anchor++) {
            if (group_of[anchor] == best_b) group_of[anchor] = best_a;
        }
        for (Py_ssize_t other = 0; other < count; other++) {
            if (other == best_a || !groups[other].alive) continue;
            Group both = merged(&groups[best_a], &groups[other]);
            Py_ssize_t a = other < best_a ? other : best_a, b = other < best_a ? best_a : other;
            delta[a * count + b] = group_cost(&both) - cost[best_a] - cost[other];
        }
    }
    int next = 0;
    for (Py_ssize_t group = 0; group < count; group++) {
        if (!groups[group].alive) continue;
        for (Py_ssize_t anchor = 0; anchor < count; anchor++) {
            if (group_of[anchor] == group) bucket_of[anchor] = next;
        }
        next++;
    }
    PyMem_Free(groups);
    PyMem_Free(cost);
    PyMem_Free(group_of);
    PyMem_Free(delta);
    return 0;
}

static void
Scanner_dealloc(Scanner *self)
{
    for (int bucket = 0; bucket < BUCKETS; bucket++) PyMem_Free(self->members[bucket]);
    PyMem_Free(self->table);
    Py_XDECREF(self->anchors);
    Py_XDECREF(self->line_starts);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
Scanner_init(Scanner *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"anchors", "line_starts", NULL};
    PyObject *anchors, *line_starts = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O", keywords, &anchors, &line_starts)) return -1;
    PyObject *tuple = PySequence_Tuple(anchors);
    if (tuple == NULL) return -1;
    PyObject *starts = line_starts ? PySequence_Tuple(line_starts) : PyTuple_New(0);
    if (starts == NULL) {
        Py_DECREF(tuple);
        return -1;
    }
    Py_XSETREF(self->anchors, tuple);
    Py_XSETREF(self->line_starts, starts);
    Py_ssize_t count = PyTuple_GET_SIZE(tuple);
    if (count == 0) {
        PyErr_SetString(PyExc_ValueError, "anchors must not be empty");
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(starts); i++) {
        if (!PyBytes_Check(PyTuple_GET_ITEM(starts, i))) {
            PyErr_SetString(PyExc_TypeError, "line_starts must be bytes");
            return -1;
        }
    }
    Anchor *table = PyMem_Calloc(count, sizeof(Anchor));
    int *bucket_of = PyMem_Calloc(count, sizeof(int));
    if (table == NULL || bucket_of == NULL) {
        PyMem_Free(table);
        PyMem_Free(bucket_of);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyTuple_GET_ITEM(tuple, i);
        if (!PyBytes_Check(item) || PyBytes_GET_SIZE(item) < FINGERPRINT) {
            PyMem_Free(table);
            PyMem_Free(bucket_of);
            PyErr_SetString(PyExc_ValueError, "anchors must be bytes of three bytes at least");
            return -1;
        }
        table[i].bytes = (const uint8_t *)PyBytes_AS_STRING(item);
        table[i].length = PyBytes_GET_SIZE(item);
        table[i].offset = rarest_offset(table[i].bytes, table[i].length);
        table[i].fingerprint = load_fingerprint(table[i].bytes + table[i].offset);
    }
    if (assign_buckets(table, count, bucket_of) < 0) {
        PyMem_Free(table);
        PyMem_Free(bucket_of);
        return -1;
    }
    for (int bucket = 0; bucket < BUCKETS; bucket++) {
        PyMem_Free(self->members[bucket]);
        self->members[bucket] = PyMem_Calloc(count, sizeof(Py_ssize_t));
        self->member_count[bucket] = 0;
        if (self->members[bucket] == NULL) {
            PyMem_Free(table);
            PyMem_Free(bucket_of);
            PyErr_NoMemory();
            return -1;
        }
    }
    memset(self->exact, 0, sizeof(self->exact));
    memset(self->low, 0, sizeof(self->low));
    memset(self->high, 0, sizeof(self->high));
    for (Py_ssize_t index = 0; index < count; index++) {
        int bucket = bucket_of[index];
        const Anchor *anchor = &table[index];
        self->members[bucket][self->member_count[bucket]++] = index;
        for (int i = 0; i < FINGERPRINT; i++) {
            uint8_t byte = anchor->bytes[anchor->offset + i];
            self->exact[i][byte] |= (uint8_t)(1u << bucket);
            self->low[i][byte & 15] |= (uint8_t)(1u << bucket);
            self->low[i][16 + (byte & 15)] |= (uint8_t)(1u << bucket);
            self->high[i][byte >> 4] |= (uint8_t)(1u << bucket);
            self->high[i][16 + (byte >> 4)] |= (uint8_t)(1u << bucket);
        }
    }
    PyMem_Free(bucket_of);
    PyMem_Free(self->table);
    self->table = table;
    self->count = count;
    return 0;
}

typedef struct {
    const uint8_t *data;
    Py_ssize_t length;
    Py_ssize_t newlines;
    Py_ssize_t line_end; /* end (after the newline) of the last line reported */
    PyObject *starts;
    PyObject *prefixed;
} ScanState;

static int
append_offset(PyObject *list, Py_ssize_t offset)
{
    PyObject *number = PyLong_FromSsize_t(offset);
    if (number == NULL) return -1;
    int failed = PyList_Append(list, number);
    Py_DECREF(number);
    return failed;
}

/* Report the line holding the anchor that starts at ``start``. */
static int
report_line(const Scanner *self, ScanState *state, Py_ssize_t start)
{
    const uint8_t *data = state->data;
    const uint8_t *before = start > state->line_end
        ? memrchr(data + state->line_end, '\n', (size_t)(start - state->line_end)) : NULL;
    Py_ssize_t line = before ? before - data + 1 : state->line_end;
    const uint8_t *after = memchr(data + start, '\n', (size_t)(state->length - start));
    state->line_end = after ? after - data + 1 : state->length;
    if (append_offset(state->starts, line) < 0) return -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->line_starts); i++) {
        PyObject *prefix = PyTuple_GET_ITEM(self->line_starts, i);
        Py_ssize_t size = PyBytes_GET_SIZE(prefix);
        if (size <= state->line_end - line && memcmp(data + line, PyBytes_AS_STRING(prefix), (size_t)size) == 0) {
            return append_offset(state->prefixed, line);
        }
    }
    return 0;
}

/* A fingerprint of the buckets in ``buckets`` may start at ``position``: verify its anchors. */
static int
verify(const Scanner *self, ScanState *state, Py_ssize_t position, unsigned buckets)
{
    if (position < state->line_end) return 0; /* on a line already reported */
    const uint8_t *at = state->data + position;
    buckets &= self->exact[0][at[0]] & self->exact[1][at[1]] & self->exact[2][at[2]];
    uint32_t fingerprint = buckets ? load_fingerprint(at) : 0;
    while (buckets) {
        int bucket = __builtin_ctz(buckets);
        buckets &= buckets - 1;
        for (Py_ssize_t i = 0; i < self->member_count[bucket]; i++) {
            const Anchor *anchor = &self->table[self->members[bucket][i]];
            Py_ssize_t start = position - anchor->offset;
            if (anchor->fingerprint == fingerprint && start >= 0 && start + anchor->length <= state->length
                && memcmp(state->data + start, anchor->bytes, (size_t)anchor->length) == 0) {
                return report_line(self, state, start);
            }
        }
    }
    return 0;
}

static int
scan_bytewise(const Scanner *self, ScanState *state, Py_ssize_t from)
{
    const uint8_t *data = state->data;
    Py_ssize_t length = state->length;
    for (Py_ssize_t position = from; position < length; position++) {
        state->newlines += data[position] == '\n';
        if (position + FINGERPRINT > length) continue;
        unsigned buckets = self->exact[0][data[position]] & self->exact[1][data[position + 1]]
                           & self->exact[2][data[position + 2]];
        if (buckets && verify(self, state, position, buckets) < 0) return -1;
    }
    return 0;
}

#ifdef HAVE_AVX2_SCAN
__attribute__((target("avx2"))) static inline __m256i
nibble_match(__m256i low, __m256i high, __m256i bytes, __m256i nibble_mask)
{
    return _mm256_and_si256(_mm256_shuffle_epi8(low, _mm256_and_si256(bytes, nibble_mask)),
                            _mm256_shuffle_epi8(high, _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble_mask)));
}

/* 32 positions at a time; returns where the byte-wise scan has to take over. */
__attribute__((target("avx2,popcnt"))) static Py_ssize_t
scan_avx2(const Scanner *self, ScanState *state)
{
    const uint8_t *data = state->data;
    const Py_ssize_t length = state->length;
    const __m256i nibble_mask = _mm256_set1_epi8(0x0f);
    const __m256i newline = _mm256_set1_epi8('\n');
    const __m256i zero = _mm256_setzero_si256();
    /* In registers: the loop must not reload them after every store to the state. */
    const __m256i low0 = _mm256_loadu_si256((const __m256i *)self->low[0]);
    const __m256i high0 = _mm256_loadu_si256((const __m256i *)self->high[0]);
    const __m256i low1 = _mm256_loadu_si256((const __m256i *)self->low[1]);
    const __m256i high1 = _mm256_loadu_si256((const __m256i *)self->high[1]);
    const __m256i low2 = _mm256_loadu_si256((const __m256i *)self->low[2]);
    const __m256i high2 = _mm256_loadu_si256((const __m256i *)self->high[2]);
    Py_ssize_t newlines = 0, position = 0;
    for (; position + 32 + FINGERPRINT - 1 <= length; position += 32) {
        __m256i first = _mm256_loadu_si256((const __m256i *)(data + position));
        __m256i second = _mm256_loadu_si256((const __m256i *)(data + position + 1));
        __m256i third = _mm256_loadu_si256((const __m256i *)(data + position + 2));
        newlines += __builtin_popcount((unsigned)_mm256_movemask_epi8(_mm256_cmpeq_epi8(first, newline)));
        __m256i buckets = _mm256_and_si256(_mm256_and_si256(nibble_match(low0, high0, first, nibble_mask),
                                                            nibble_match(low1, high1, second, nibble_mask)),
                                           nibble_match(low2, high2, third, nibble_mask));
        unsigned candidates = ~(unsigned)_mm256_movemask_epi8(_mm256_cmpeq_epi8(buckets, zero));
        if (candidates) {
            uint8_t lanes[32];
            _mm256_storeu_si256((__m256i *)lanes, buckets);
            while (candidates) {
                int lane = __builtin_ctz(candidates);
                candidates &= candidates - 1;
                if (verify(self, state, position + lane, lanes[lane]) < 0) return -1;
            }
        }
    }
    state->newlines += newlines;
    return position;
}

static int have_avx2;
#endif

PyDoc_STRVAR(Scanner_scan_doc,
"scan(data) -> (newlines, starts, prefixed)\n\n"
"The number of newlines in ``data``, the start offsets of the lines holding an anchor\n"
"(ascending, each once), and those of them that begin with one of ``line_starts``.");

static PyObject *
Scanner_scan(Scanner *self, PyObject *argument)
{
    Py_buffer view;
    if (PyObject_GetBuffer(argument, &view, PyBUF_SIMPLE) < 0) return NULL;
    ScanState state = {view.buf, view.len, 0, 0, PyList_New(0), PyList_New(0)};
    PyObject *result = NULL;
    if (state.starts == NULL || state.prefixed == NULL) goto done;
    Py_ssize_t from = 0;
#ifdef HAVE_AVX2_SCAN
    if (have_avx2 && (from = scan_avx2(self, &state)) < 0) goto done;
#endif
    if (scan_bytewise(self, &state, from) < 0) goto done;
    result = Py_BuildValue("nOO", state.newlines, state.starts, state.prefixed);
done:
    Py_XDECREF(state.starts);
    Py_XDECREF(state.prefixed);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *
Scanner_get_anchors(Scanner *self, void *closure)
{
    return Py_NewRef(self->anchors);
}

static PyMethodDef Scanner_methods[] = {
    {"scan", (PyCFunction)Scanner_scan, METH_O, Scanner_scan_doc},
    {NULL},
};

static PyGetSetDef Scanner_getset[] = {
    {"anchors", (getter)Scanner_get_anchors, NULL, "The anchors, as given.", NULL},
    {NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "exporter.parse._speedups.Scanner",
    .tp_doc = PyDoc_STR("Scanner(anchors, line_starts=()): finds the lines of a block holding any anchor."),
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Scanner_init,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_methods = Scanner_methods,
    .tp_getset = Scanner_getset,
};

/* ------------------------------------------------------------------------------------------ */
/* StepColumns: MindFormers PyNative step lines into columns                                  */
/*
 * The twin of parse/mindformers.py's parse_pynative, a line at a time, for ASCII lines (a
 * line with any other byte is declined and goes the Python way). Numbers are read by
 * PyOS_string_to_double, the function behind float(); a token it does not take whole goes
 * to float() itself, so the values are float()'s.
 */

#define MAX_NUMBER_TEXT 64
#define MAX_DIGITS 18 /* an int64 for sure; a longer step number goes the Python way */

typedef struct {
    PyObject_HEAD
    PyObject *batch_type;
    PyObject *steps, *loss_steps, *losses, *grad_norm_steps, *grad_norms;
    PyObject *total_steps;      /* last seen, or NULL */
    PyObject *learning_rate, *step_time_seconds, *throughput, *throughput_unit; /* last non-None, or NULL */
    PyObject *named;            /* name -> [last value, records holding it], in order of appearance */
} StepColumns;

static int
is_space(uint8_t byte)
{
    /* str.isspace() for ASCII: what the regular expressions' \s and str.strip() see. */
    return byte == ' ' || (byte >= '\t' && byte <= '\r') || (byte >= 0x1c && byte <= 0x1f);
}

static int
is_name_start(uint8_t byte)
{
    return (byte >= 'A' && byte <= 'Z') || (byte >= 'a' && byte <= 'z') || byte == '_';
}

static int
is_name(uint8_t byte)
{
    return is_name_start(byte) || (byte >= '0' && byte <= '9');
}

static const uint8_t *
skip_spaces(const uint8_t *at, const uint8_t *end)
{
    while (at < end && is_space(*at)) at++;
    return at;
}

static int
expect(const uint8_t **at, const uint8_t *end, const char *literal)
{
    size_t length = strlen(literal);
    if ((size_t)(end - *at) < length || memcmp(*at, literal, length) != 0) return 0;
    *at += length;
    return 1;
}

/* Digits at *at as an int64; 0 when there are none, -1 when too many. */
static int
read_digits(const uint8_t **at, const uint8_t *end, long long *value)
{
    const uint8_t *start = *at;
    long long number = 0;
    while (*at < end && **at >= '0' && **at <= '9') {
        if (*at - start >= MAX_DIGITS) return -1;
        number = number * 10 + (**at - '0');
        (*at)++;
    }
    *value = number;
    return *at > start;
}

/* A plain decimal ``[-+]digits[.digits][e[-+]digits]`` with at most 15 significant digits and a
 * power of ten up to 22: one exact integer, one exact power, one correctly rounded operation
 * (Clinger's fast path), so the same double float() gives. 0 when the token is not that. */
static int
simple_decimal(const uint8_t *at, const uint8_t *end, double *value)
{
    static const double powers[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                     1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    int negative = 0;
    if (at < end && (*at == '-' || *at == '+')) negative = *at++ == '-';
    uint64_t mantissa = 0;
    int digits = 0, significant = 0, scale = 0;
    for (; at < end && *at >= '0' && *at <= '9'; at++, digits++) {
        if (mantissa || *at != '0') significant++;
        mantissa = mantissa * 10 + (uint64_t)(*at - '0');
        if (significant > 15) return 0;
    }
    if (at < end && *at == '.') {
        for (at++; at < end && *at >= '0' && *at <= '9'; at++, digits++, scale--) {
            if (mantissa || *at != '0') significant++;
            mantissa = mantissa * 10 + (uint64_t)(*at - '0');
            if (significant > 15) return 0;
        }
    }
    if (digits == 0) return 0;
    if (at < end && (*at == 'e' || *at == 'E')) {
        at++;
        int exponent_negative = 0, exponent = 0, exponent_digits = 0;
        if (at < end && (*at == '-' || *at == '+')) exponent_negative = *at++ == '-';
        for (; at < end && *at >= '0' && *at <= '9'; at++, exponent_digits++) {
            if (exponent > 1000) return 0;
            exponent = exponent * 10 + (*at - '0');
        }
        if (exponent_digits == 0) return 0;
        scale += exponent_negative ? -exponent : exponent;
    }
    if (at != end || scale < -22 || scale > 22) return 0;
    double result = scale < 0 ? (double)mantissa / powers[-scale] : (double)mantissa * powers[scale];
    *value = negative ? -result : result;
    return 1;
}

/* float(token) as parse_float gives it: a new float, Py_None (not a number), or NULL (error). */
static PyObject *
parse_float(const uint8_t *token, Py_ssize_t length)
{
    if (length == 0) Py_RETURN_NONE;
    double fast;
    if (simple_decimal(token, token + length, &fast)) return PyFloat_FromDouble(fast);
    if (length < MAX_NUMBER_TEXT) {
        char text[MAX_NUMBER_TEXT];
        memcpy(text, token, (size_t)length);
        text[length] = '\0';
        char *end = NULL;
        double value = PyOS_string_to_double(text, &end, NULL);
        if (end == text + length && !(value == -1.0 && PyErr_Occurred())) return PyFloat_FromDouble(value);
        PyErr_Clear();
    }
    PyObject *string = PyUnicode_DecodeASCII((const char *)token, length, NULL);
    if (string == NULL) return NULL;
    PyObject *number = PyFloat_FromString(string);
    Py_DECREF(string);
    if (number == NULL && PyErr_ExceptionMatches(PyExc_ValueError)) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return number;
}

static Py_ssize_t
span_of(const uint8_t *token, Py_ssize_t length, const char *accepted)
{
    Py_ssize_t span = 0;
    while (span < length && token[span] && strchr(accepted, token[span])) span++;
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
number_part(const uint8_t *token, Py_ssize_t length, const char *accepted)
{
    Py_ssize_t span = span_of(token, length, accepted);
    if (span) return span;
    return starts_with_nocase(token, length, "nan") || starts_with_nocase(token, length, "inf") ? 3 : 0;
}

/* parse_duration_seconds(token, default_unit="ms"). */
static PyObject *
parse_duration(const uint8_t *token, Py_ssize_t length)
{
    static const char *units[] = {"ms", "s", "us", "sec", "seconds"};
    static const double per_second[] = {1e3, 1.0, 1e6, 1.0, 1.0};
    Py_ssize_t number = number_part(token, length, "-+0123456789.eE");
    if (number == 0) Py_RETURN_NONE;
    const uint8_t *unit = skip_spaces(token + number, token + length);
    Py_ssize_t unit_length = token + length - unit;
    double divisor = 1e3; /* no unit: milliseconds */
    if (unit_length) {
        int found = -1;
        for (int i = 0; i < 5 && found < 0; i++) {
            if ((Py_ssize_t)strlen(units[i]) == unit_length && starts_with_nocase(unit, unit_length, units[i])) found = i;
        }
        if (found < 0) Py_RETURN_NONE;
        divisor = per_second[found];
    }
    PyObject *value = parse_float(token, number);
    if (value == NULL || value == Py_None) return value;
    double seconds = PyFloat_AS_DOUBLE(value) / divisor;
    Py_DECREF(value);
    return PyFloat_FromDouble(seconds);
}

/* parse_number_with_unit(token): sets *value and *unit (a str, NULL when empty), or *value to None. */
static int
parse_with_unit(const uint8_t *token, Py_ssize_t length, PyObject **value, PyObject **unit)
{
    *value = NULL;
    *unit = NULL;
    Py_ssize_t number = number_part(token, length, "-+0123456789.eE,");
    const uint8_t *rest = skip_spaces(token + number, token + length);
    Py_ssize_t rest_length = token + length - rest;
    if (number == 0 || span_of(rest, rest_length, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz/%") != rest_length) {
        *value = Py_NewRef(Py_None);
        return 0;
    }
    uint8_t *text = PyMem_Malloc((size_t)number); /* the number without its thousands separators */
    if (text == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t kept = 0;
    for (Py_ssize_t i = 0; i < number; i++) {
        if (token[i] != ',') text[kept++] = token[i];
    }
    *value = parse_float(text, kept);
    PyMem_Free(text);
    if (*value == NULL) return -1;
    if (*value != Py_None && rest_length) {
        *unit = PyUnicode_DecodeASCII((const char *)rest, rest_length, NULL);
        if (*unit == NULL) {
            Py_CLEAR(*value);
            return -1;
        }
    }
    return 0;
}

typedef struct {
    PyObject *loss, *learning_rate, *grad_norm, *step_time, *throughput, *unit; /* NULL: not set */
    PyObject *aux, *extra; /* dict name -> value, created on first use */
} Fields;

static void
clear_fields(Fields *fields)
{
    Py_CLEAR(fields->loss);
    Py_CLEAR(fields->learning_rate);
    Py_CLEAR(fields->grad_norm);
    Py_CLEAR(fields->step_time);
    Py_CLEAR(fields->throughput);
    Py_CLEAR(fields->unit);
    Py_CLEAR(fields->aux);
    Py_CLEAR(fields->extra);
}

static int
name_is(const uint8_t *name, Py_ssize_t length, const char *literal)
{
    return (Py_ssize_t)strlen(literal) == length && memcmp(name, literal, (size_t)length) == 0;
}

/* mindformers._apply_field */
static int
apply_field(Fields *fields, const uint8_t *name, Py_ssize_t name_length, const uint8_t *raw, Py_ssize_t raw_length)
{
    PyObject *value;
    if (name_is(name, name_length, "loss")) {
        if ((value = parse_float(raw, raw_length)) == NULL) return -1;
        Py_XSETREF(fields->loss, value);
    } else if (name_is(name, name_length, "lr")) {
        if ((value = parse_float(raw, raw_length)) == NULL) return -1;
        Py_XSETREF(fields->learning_rate, value);
    } else if (name_is(name, name_length, "grad_norm")) {
        if (raw_length == 3 && memcmp(raw, "NaN", 3) == 0) return 0; /* not obtained this step */
        if ((value = parse_float(raw, raw_length)) == NULL) return -1;
        Py_XSETREF(fields->grad_norm, value);
    } else if (name_is(name, name_length, "per_step_time")) {
        if ((value = parse_duration(raw, raw_length)) == NULL) return -1;
        Py_XSETREF(fields->step_time, value);
    } else if (name_is(name, name_length, "throughput")) {
        PyObject *unit;
        if (parse_with_unit(raw, raw_length, &value, &unit) < 0) return -1;
        if (value == Py_None) {
            Py_DECREF(value);
            return 0;
        }
        Py_XSETREF(fields->throughput, value);
        Py_XSETREF(fields->unit, unit);
    } else {
        if ((value = parse_float(raw, raw_length)) == NULL) return -1;
        if (value == Py_None) {
            Py_DECREF(value);
            return 0;
        }
        int aux = name_length >= 5 && memcmp(name + name_length - 5, "_loss", 5) == 0;
        PyObject **target = aux ? &fields->aux : &fields->extra;
        PyObject *key = PyUnicode_DecodeASCII((const char *)name, name_length, NULL);
        if (key == NULL || (*target == NULL && (*target = PyDict_New()) == NULL)) {
            Py_XDECREF(key);
            Py_DECREF(value);
            return -1;
        }
        int failed = PyDict_SetItem(*target, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        return failed;
    }
    return 0;
}

/* The fields of a record body (``_FIELD.findall``): 0, or -1 on error. */
static int
parse_fields(Fields *fields, const uint8_t *at, const uint8_t *end)
{
    while (at < end) {
        if (!is_name_start(*at)) {
            at++;
            continue;
        }
        const uint8_t *name_end = at;
        while (name_end < end && is_name(*name_end)) name_end++;
        const uint8_t *colon = skip_spaces(name_end, end);
        if (colon == end || *colon != ':') {
            at++;
            continue;
        }
        const uint8_t *value = skip_spaces(colon + 1, end);
        const uint8_t *value_end = value;
        if (value == end || *value == ',') {
            if (value == colon + 1) { /* ``[^,}]+`` needs a byte: no field here */
                at++;
                continue;
            }
            /* The spaces after the colon give one back: the value is blank. */
        } else {
            value_end = memchr(value, ',', (size_t)(end - value));
            if (value_end == NULL) value_end = end;
        }
        const uint8_t *stripped = value_end;
        while (stripped > value && is_space(stripped[-1])) stripped--;
        if (apply_field(fields, at, name_end - at, value, stripped - value) < 0) return -1;
        at = value_end;
    }
    return 0;
}

/* mindformers._RECORD at ``brace``: 1, 0 (no match), -1 (a number too long for an int64). */
static int
match_record(const uint8_t *brace, const uint8_t *end, long long *step, long long *total,
             const uint8_t **body, const uint8_t **body_end)
{
    const uint8_t *at = skip_spaces(brace + 1, end);
    if (!expect(&at, end, "step:")) return 0;
    at = skip_spaces(at, end);
    if (!expect(&at, end, "[")) return 0;
    at = skip_spaces(at, end);
    int found = read_digits(&at, end, step);
    if (found <= 0) return found;
    at = skip_spaces(at, end);
    if (!expect(&at, end, "/")) return 0;
    at = skip_spaces(at, end);
    found = read_digits(&at, end, total);
    if (found <= 0) return found;
    at = skip_spaces(at, end);
    if (!expect(&at, end, "]")) return 0;
    at = skip_spaces(at, end);
    if (!expect(&at, end, ",")) return 0;
    *body = at;
    while (at < end && *at != '{' && *at != '}') at++;
    if (at == end || *at != '}') return 0;
    *body_end = at;
    return 1;
}

static int
note_named(StepColumns *self, PyObject *values)
{
    if (values == NULL) return 0;
    Py_ssize_t position = 0;
    PyObject *name, *value;
    while (PyDict_Next(values, &position, &name, &value)) {
        PyObject *entry = PyDict_GetItemWithError(self->named, name);
        if (entry == NULL) {
            if (PyErr_Occurred()) return -1;
            entry = Py_BuildValue("[Oi]", value, 1);
            if (entry == NULL || PyDict_SetItem(self->named, name, entry) < 0) {
                Py_XDECREF(entry);
                return -1;
            }
            Py_DECREF(entry);
            continue;
        }
        PyObject *count = PyLong_FromLong(PyLong_AsLong(PyList_GET_ITEM(entry, 1)) + 1);
        if (count == NULL) return -1;
        PyList_SetItem(entry, 1, count);
        PyList_SetItem(entry, 0, Py_NewRef(value));
    }
    return 0;
}

/* One record into the columns, in the order the state applies a StepRecord's fields. */
static int
commit(StepColumns *self, long long step_number, long long total_number, Fields *fields)
{
    PyObject *step = PyLong_FromLongLong(step_number);
    if (step == NULL) return -1;
    PyObject *total = PyLong_FromLongLong(total_number);
    int failed = total == NULL || PyList_Append(self->steps, step) < 0;
    if (!failed) Py_XSETREF(self->total_steps, total);
    if (!failed && fields->learning_rate && fields->learning_rate != Py_None)
        Py_XSETREF(self->learning_rate, Py_NewRef(fields->learning_rate));
    if (!failed && fields->step_time && fields->step_time != Py_None)
        Py_XSETREF(self->step_time_seconds, Py_NewRef(fields->step_time));
    if (!failed && fields->throughput) {
        Py_XSETREF(self->throughput, Py_NewRef(fields->throughput));
        if (fields->unit) Py_XSETREF(self->throughput_unit, Py_NewRef(fields->unit));
    }
    failed = failed || note_named(self, fields->aux) < 0 || note_named(self, fields->extra) < 0;
    if (!failed && fields->loss && fields->loss != Py_None) {
        failed = PyList_Append(self->loss_steps, step) < 0 || PyList_Append(self->losses, fields->loss) < 0;
    }
    if (!failed && fields->grad_norm && fields->grad_norm != Py_None) {
        failed = PyList_Append(self->grad_norm_steps, step) < 0 || PyList_Append(self->grad_norms, fields->grad_norm) < 0;
    }
    Py_DECREF(step);
    return failed ? -1 : 0;
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

/* ``[default3]:``, ``[rank3]:``: the line parser strips these and knows their rank. */
static int
has_rank_prefix(const uint8_t *at, const uint8_t *end)
{
    if (at == end || *at++ != '[') return 0;
    const uint8_t *role = at;
    while (at < end && (is_name_start(*at))) at++;
    if (at == role) return 0;
    const uint8_t *digits = at;
    while (at < end && *at >= '0' && *at <= '9') at++;
    return at > digits && end - at >= 2 && at[0] == ']' && at[1] == ':';
}

PyDoc_STRVAR(StepColumns_add_doc,
"add(line) -> bool\n\n"
"Add the step record of a line (bytes, without its newline); False when the line holds\n"
"none, or when the line parser has to read it (a rank prefix, a line that is not ASCII,\n"
"a step that does not fit in 64 bits).");

static PyObject *
StepColumns_add(StepColumns *self, PyObject *argument)
{
    if (!PyBytes_Check(argument)) {
        PyErr_SetString(PyExc_TypeError, "add() takes bytes");
        return NULL;
    }
    const uint8_t *line = (const uint8_t *)PyBytes_AS_STRING(argument);
    const uint8_t *end = line + PyBytes_GET_SIZE(argument);
    if (!is_ascii(line, end)) Py_RETURN_FALSE; /* decoding and Unicode \s, \d: the Python parser's */
    if (has_rank_prefix(line, end)) Py_RETURN_FALSE;
    const uint8_t *brace = line;
    while ((brace = memchr(brace, '{', (size_t)(end - brace))) != NULL) {
        long long step, total;
        const uint8_t *body, *body_end;
        int found = match_record(brace, end, &step, &total, &body, &body_end);
        if (found < 0) Py_RETURN_FALSE;
        if (found == 0) {
            brace++;
            continue;
        }
        Fields fields = {0};
        int failed = parse_fields(&fields, body, body_end) < 0 || commit(self, step, total, &fields) < 0;
        clear_fields(&fields);
        if (failed) return NULL;
        Py_RETURN_TRUE;
    }
    Py_RETURN_FALSE;
}

static void
StepColumns_reset(StepColumns *self)
{
    Py_CLEAR(self->steps);
    Py_CLEAR(self->loss_steps);
    Py_CLEAR(self->losses);
    Py_CLEAR(self->grad_norm_steps);
    Py_CLEAR(self->grad_norms);
    Py_CLEAR(self->total_steps);
    Py_CLEAR(self->learning_rate);
    Py_CLEAR(self->step_time_seconds);
    Py_CLEAR(self->throughput);
    Py_CLEAR(self->throughput_unit);
    Py_CLEAR(self->named);
}

static int
StepColumns_start(StepColumns *self)
{
    self->steps = PyList_New(0);
    self->loss_steps = PyList_New(0);
    self->losses = PyList_New(0);
    self->grad_norm_steps = PyList_New(0);
    self->grad_norms = PyList_New(0);
    self->named = PyDict_New();
    if (!self->steps || !self->loss_steps || !self->losses || !self->grad_norm_steps || !self->grad_norms || !self->named) {
        StepColumns_reset(self);
        return -1;
    }
    return 0;
}

static PyObject *
or_none(PyObject *value)
{
    return value ? value : Py_None;
}

PyDoc_STRVAR(StepColumns_take_doc,
"take() -> StepBatch\n\nThe records added since the last take, as batch_type(...); the columns start empty again.");

static PyObject *
StepColumns_take(StepColumns *self, PyObject *unused)
{
    PyObject *named = PyDict_New();
    if (named == NULL) return NULL;
    Py_ssize_t position = 0;
    PyObject *name, *entry;
    while (PyDict_Next(self->named, &position, &name, &entry)) {
        PyObject *pair = PyList_AsTuple(entry);
        if (pair == NULL || PyDict_SetItem(named, name, pair) < 0) {
            Py_XDECREF(pair);
            Py_DECREF(named);
            return NULL;
        }
        Py_DECREF(pair);
    }
    PyObject *batch = PyObject_CallFunction(
        self->batch_type, "OOOOOOOOOOO", self->steps, or_none(self->total_steps), self->loss_steps, self->losses,
        self->grad_norm_steps, self->grad_norms, or_none(self->learning_rate), or_none(self->step_time_seconds),
        or_none(self->throughput), or_none(self->throughput_unit), named);
    Py_DECREF(named);
    if (batch == NULL) return NULL;
    StepColumns_reset(self);
    if (StepColumns_start(self) < 0) {
        Py_DECREF(batch);
        return NULL;
    }
    return batch;
}

static Py_ssize_t
StepColumns_length(StepColumns *self)
{
    return PyList_GET_SIZE(self->steps);
}

static int
StepColumns_init(StepColumns *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"batch_type", NULL};
    PyObject *batch_type;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O", keywords, &batch_type)) return -1;
    Py_XSETREF(self->batch_type, Py_NewRef(batch_type));
    StepColumns_reset(self);
    return StepColumns_start(self);
}

static void
StepColumns_dealloc(StepColumns *self)
{
    StepColumns_reset(self);
    Py_XDECREF(self->batch_type);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef StepColumns_methods[] = {
    {"add", (PyCFunction)StepColumns_add, METH_O, StepColumns_add_doc},
    {"take", (PyCFunction)StepColumns_take, METH_NOARGS, StepColumns_take_doc},
    {NULL},
};

static PySequenceMethods StepColumns_as_sequence = {
    .sq_length = (lenfunc)StepColumns_length,
};

static PyTypeObject StepColumnsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "exporter.parse._speedups.StepColumns",
    .tp_doc = PyDoc_STR("StepColumns(batch_type): MindFormers PyNative step lines gathered into a batch."),
    .tp_basicsize = sizeof(StepColumns),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)StepColumns_init,
    .tp_dealloc = (destructor)StepColumns_dealloc,
    .tp_methods = StepColumns_methods,
    .tp_as_sequence = &StepColumns_as_sequence,
};

/* ------------------------------------------------------------------------------------------ */

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "exporter.parse._speedups",
    .m_doc = "Native twins of the parse hot path (see parse/block.py and parse/columns.py).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
#ifdef HAVE_AVX2_SCAN
    __builtin_cpu_init();
    have_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt");
#endif
    if (PyType_Ready(&ScannerType) < 0 || PyType_Ready(&StepColumnsType) < 0) return NULL;
    PyObject *module = PyModule_Create(&speedups_module);
    if (module == NULL) return NULL;
    if (PyModule_AddObjectRef(module, "Scanner", (PyObject *)&ScannerType) < 0
        || PyModule_AddObjectRef(module, "StepColumns", (PyObject *)&StepColumnsType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
#ifdef HAVE_AVX2_SCAN
    if (PyModule_AddIntConstant(module, "SIMD", have_avx2) < 0) {
#else
    if (PyModule_AddIntConstant(module, "SIMD", 0) < 0) {
#endif
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
