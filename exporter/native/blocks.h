/* What scan.c and step_fields.c both do over a block, without the interpreter (a pass may run on a thread of its
 * own: scan.c's Ahead, step_fields.c's StepsAhead): growable arrays of offsets, a literal's search, and a block's
 * lines grouped by their prefix of tags (scan.py's group_lines defines it). Included by both: each kernel is one
 * file, built alone. */
#ifndef TRAINLOG_BLOCKS_H
#define TRAINLOG_BLOCKS_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* Work on a thread of its own that never takes the interpreter (scan.c's Ahead, step_fields.c's StepsAhead). */
typedef struct {
    void *(*work)(void *);
    void *argument;
    pthread_t thread;
    int running; /* started and not joined */
    int done;
} Worker;

/* ``work(argument)`` started; without a thread (none could be started) it runs when first waited for. */
static void
worker_start(Worker *worker, void *(*work)(void *), void *argument)
{
    *worker = (Worker){work, argument};
    worker->running = pthread_create(&worker->thread, NULL, work, argument) == 0;
}

/* The worker's thread joined, the interpreter free meanwhile; nothing is run here. */
static void
worker_join(Worker *worker)
{
    if (!worker->running) return;
    Py_BEGIN_ALLOW_THREADS
    pthread_join(worker->thread, NULL);
    Py_END_ALLOW_THREADS
    worker->running = 0;
    worker->done = 1;
}

/* Until the work is done: its thread joined, or the work run here. */
static void
worker_wait(Worker *worker)
{
    worker_join(worker);
    if (!worker->done && worker->work != NULL) {
        worker->work(worker->argument);
        worker->done = 1;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Growable arrays: a pass collects its findings in them without the interpreter (it may run on a
 * thread of its own), and they become Python lists or arrays only once it is done. */

typedef struct {
    int64_t *items;
    Py_ssize_t count, capacity;
} Offsets;

typedef struct {
    double *items;
    Py_ssize_t count, capacity;
} Doubles;

/* 0, or -1 when memory ran out (nothing raised: the caller may not hold the GIL). */
static int
grow_items(void **items, Py_ssize_t *capacity, Py_ssize_t size)
{
    Py_ssize_t wanted = *capacity ? 2 * *capacity : 256;
    void *grown = realloc(*items, (size_t)wanted * (size_t)size);
    if (grown == NULL) return -1;
    *items = grown;
    *capacity = wanted;
    return 0;
}

static inline int
push_offset(Offsets *array, int64_t value)
{
    if (array->count == array->capacity && grow_items((void **)&array->items, &array->capacity, sizeof(int64_t)) < 0) return -1;
    array->items[array->count++] = value;
    return 0;
}

static inline int
push_double(Doubles *array, double value)
{
    if (array->count == array->capacity && grow_items((void **)&array->items, &array->capacity, sizeof(double)) < 0) return -1;
    array->items[array->count++] = value;
    return 0;
}

/* memcmp(a, b, length) == 0 without a call: the prefixes, tags and names compared on each line are a few bytes long. */
static inline int
same_bytes(const void *a, const void *b, Py_ssize_t length)
{
    const uint8_t *x = a, *y = b;
    for (; length >= 8; x += 8, y += 8, length -= 8) {
        uint64_t left, right;
        memcpy(&left, x, 8);
        memcpy(&right, y, 8);
        if (left != right) return 0;
    }
    for (; length > 0; x++, y++, length--) {
        if (*x != *y) return 0;
    }
    return 1;
}

/* The first ``literal`` (not empty) in at[0:size], NULL when none: its first byte by memchr, then the rest (glibc's
 * memmem reads a long block at a few instructions a byte, and a short one after a setup of its own). */
static const void *
find_literal(const void *at, Py_ssize_t size, const void *literal, Py_ssize_t length)
{
    const char *match = at, *end = match + size, *text = literal;
    while (end - match >= length && (match = memchr(match, text[0], (size_t)(end - match - length + 1))) != NULL) {
        if (same_bytes(match + 1, text + 1, length - 1)) return match;
        match++;
    }
    return NULL;
}

#define MAX_PREFIXES 64

static int
is_tag_name(uint8_t byte)
{
    return (byte >= 'A' && byte <= 'Z') || (byte >= 'a' && byte <= 'z') || (byte >= '0' && byte <= '9') || byte == '_';
}

/* The length of the tag ``open name close`` (and one space after it) at ``at``; 0 when none is there. */
static Py_ssize_t
tag_at(const char *at, const char *end, const Py_buffer *open, const Py_buffer *close)
{
    const char *name = at + open->len;
    if (end - at < open->len || !same_bytes(at, open->buf, open->len)) return 0;
    const char *after = name;
    while (after < end && is_tag_name((uint8_t)*after)) after++;
    if (after == name || end - after < close->len || !same_bytes(after, close->buf, close->len)) return 0;
    after += close->len;
    if (after < end && *after == ' ') after++;
    return after - at;
}

typedef struct {
    Py_ssize_t groups, loose, tagged;
    int overflow; /* more than MAX_PREFIXES prefixes */
    const char *texts[MAX_PREFIXES];
    Py_ssize_t lengths[MAX_PREFIXES], counts[MAX_PREFIXES];
    Offsets starts[MAX_PREFIXES];
} Groups;

/* Where the line from ``at`` on ends (its newline, else ``end``), and in ``*first`` where ``byte`` is first found
 * before that (NULL: nowhere): one pass, sixteen bytes at a time, where two searches took two. */
static const char *
line_end_and_byte(const char *at, const char *end, char byte, const char **first)
{
    *first = NULL;
#ifdef __SSE2__
    const __m128i newline = _mm_set1_epi8('\n'), wanted = _mm_set1_epi8(byte);
    for (; end - at >= 16; at += 16) {
        __m128i bytes = _mm_loadu_si128((const __m128i *)at);
        unsigned found = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(bytes, newline));
        unsigned seen = *first ? 0 : (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(bytes, wanted));
        if (found) seen &= found - 1; /* before the newline */
        if (seen) *first = at + __builtin_ctz(seen);
        if (found) return at + __builtin_ctz(found);
    }
#endif
    const char *newline_at = memchr(at, '\n', (size_t)(end - at));
    const char *stop = newline_at ? newline_at : end;
    if (*first == NULL) *first = memchr(at, byte, (size_t)(stop - at));
    return stop;
}

/* The lines of data[0:size] grouped into ``groups`` (see group_lines), without the interpreter; -1 when memory ran
 * out. */
static int
find_groups(const char *at, Py_ssize_t size, const Py_buffer *literal, const Py_buffer *open, const Py_buffer *close,
            const Py_buffer *loose_starts, Groups *found)
{
    const char *end = at + size;
    Py_ssize_t last = 0;
    for (const char *line = at; line < end;) {
        /* The prefix of tags first, bounded by the block's end (a tag holds no newline: checked), then the line's end
         * and its first tag opener after the prefix in one pass. */
        Py_ssize_t width = 0, tag;
        while ((tag = tag_at(line + width, end, open, close)) > 0) width += tag;
        if (memchr(line, '\n', (size_t)width) != NULL) {
            width = 0;
            const char *newline = memchr(line, '\n', end - line);
            while ((tag = tag_at(line + width, newline, open, close)) > 0) width += tag;
        }
        const char *body = line + width, *bracket;
        const char *newline = line_end_and_byte(body, end, ((const char *)open->buf)[0], &bracket);
        if (newline == end) break; /* no newline: no line */
        /* A console prints a rank's lines a few at a time: the line before's group first. */
        Py_ssize_t group = last;
        if (!(group < found->groups && found->lengths[group] == width && same_bytes(found->texts[group], line, width))) {
            group = 0;
            while (group < found->groups && !(found->lengths[group] == width && same_bytes(found->texts[group], line, width))) {
                group++;
            }
        }
        last = group;
        if (group == found->groups) {
            if (group == MAX_PREFIXES) {
                found->overflow = 1;
                return 0;
            }
            found->texts[group] = line;
            found->lengths[group] = width;
            found->groups++;
        }
        found->counts[group]++;
        if (width == 0 && body < newline && memchr(loose_starts->buf, *body, loose_starts->len) != NULL) found->loose++;
        for (; bracket != NULL; bracket = memchr(bracket + 1, ((const char *)open->buf)[0], newline - bracket - 1)) {
            if (tag_at(bracket, newline, open, close)) {
                found->tagged++;
                break;
            }
        }
        if (literal->len && find_literal(body, newline - body, literal->buf, literal->len) != NULL
            && push_offset(&found->starts[group], body - at) < 0) {
            return -1;
        }
        line = newline + 1;
    }
    return 0;
}

/* array.array (each kernel's module imports it: import_array_type): offsets and values leave as an array, copied at
 * once, not as an int or float object each. */
static PyObject *array_type;

static int
import_array_type(void)
{
    if (array_type != NULL) return 0;
    PyObject *array_module = PyImport_ImportModule("array");
    array_type = array_module ? PyObject_GetAttrString(array_module, "array") : NULL;
    Py_XDECREF(array_module);
    return array_type == NULL ? -1 : 0;
}

/* An array of ``typecode`` holding ``size`` bytes of items at ``items``. */
static PyObject *
items_array(const char *typecode, const void *items, Py_ssize_t size)
{
    PyObject *array = PyObject_CallFunction(array_type, "s", typecode);
    if (array == NULL || size == 0) return array;
    PyObject *memory = PyMemoryView_FromMemory((char *)items, size, PyBUF_READ);
    PyObject *done = memory ? PyObject_CallMethod(array, "frombytes", "O", memory) : NULL;
    Py_XDECREF(memory);
    if (done == NULL) Py_CLEAR(array);
    Py_XDECREF(done);
    return array;
}

static PyObject *
groups_result(const Groups *found)
{
    if (found->overflow) return Py_NewRef(Py_None);
    PyObject *prefixes = PyList_New(found->groups), *lines = PyList_New(found->groups);
    PyObject *starts = PyList_New(found->groups), *result = NULL;
    if (prefixes == NULL || lines == NULL || starts == NULL) goto done;
    for (Py_ssize_t group = 0; group < found->groups; group++) {
        PyObject *prefix = PyBytes_FromStringAndSize(found->texts[group], found->lengths[group]);
        PyObject *count = PyLong_FromSsize_t(found->counts[group]);
        /* A console's every step line: its start in an array('q'), no int object each. */
        PyObject *offsets = items_array("q", found->starts[group].items,
                                        found->starts[group].count * (Py_ssize_t)sizeof(int64_t));
        if (prefix) PyList_SET_ITEM(prefixes, group, prefix);
        if (count) PyList_SET_ITEM(lines, group, count);
        if (offsets) PyList_SET_ITEM(starts, group, offsets);
        if (prefix == NULL || count == NULL || offsets == NULL) goto done;
    }
    result = Py_BuildValue("OOOnn", prefixes, lines, starts, found->loose, found->tagged);
done:
    Py_XDECREF(prefixes);
    Py_XDECREF(lines);
    Py_XDECREF(starts);
    return result;
}

static void
groups_free(Groups *found)
{
    for (Py_ssize_t group = 0; group < MAX_PREFIXES; group++) free(found->starts[group].items);
}

static int
check_group_arguments(const Py_buffer *open, const Py_buffer *close)
{
    if (open->len == 0 || close->len == 0) {
        PyErr_SetString(PyExc_ValueError, "tags must not be empty");
        return -1;
    }
    return 0;
}

#endif
