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

/* The first ``literal`` (not empty) in at[0:size], NULL when none: its first byte by memchr, then the rest (glibc's
 * memmem reads a long block at a few instructions a byte, and a short one after a setup of its own). */
static const void *
find_literal(const void *at, Py_ssize_t size, const void *literal, Py_ssize_t length)
{
    const char *match = at, *end = match + size, *text = literal;
    while (end - match >= length && (match = memchr(match, text[0], (size_t)(end - match - length + 1))) != NULL) {
        if (memcmp(match + 1, text + 1, (size_t)length - 1) == 0) return match;
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
    if (end - at < open->len || memcmp(at, open->buf, open->len) != 0) return 0;
    const char *after = name;
    while (after < end && is_tag_name((uint8_t)*after)) after++;
    if (after == name || end - after < close->len || memcmp(after, close->buf, close->len) != 0) return 0;
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

/* The lines of data[0:size] grouped into ``groups`` (see group_lines), without the interpreter; -1 when memory ran
 * out. */
static int
find_groups(const char *at, Py_ssize_t size, const Py_buffer *literal, const Py_buffer *open, const Py_buffer *close,
            const Py_buffer *loose_starts, Groups *found)
{
    const char *end = at + size;
    for (const char *line = at; line < end;) {
        const char *newline = memchr(line, '\n', end - line);
        if (newline == NULL) break;
        Py_ssize_t width = 0, tag;
        while ((tag = tag_at(line + width, newline, open, close)) > 0) width += tag;
        Py_ssize_t group = 0;
        while (group < found->groups && !(found->lengths[group] == width && memcmp(found->texts[group], line, width) == 0)) {
            group++;
        }
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
        const char *body = line + width;
        if (width == 0 && body < newline && memchr(loose_starts->buf, *body, loose_starts->len) != NULL) found->loose++;
        for (const char *bracket = body; (bracket = memchr(bracket, ((const char *)open->buf)[0], newline - bracket)) != NULL;
             bracket++) {
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
