/* What scan.c and step_fields.c both do over a block, without the interpreter (a pass may run on a thread of its
 * own: scan.c's Ahead, step_fields.c's StepsAhead): growable arrays of offsets, a literal's search, and a block's
 * lines grouped by their prefix of tags (scan.py's group_lines defines it). Included by both: each kernel is one
 * file, built alone. */
#ifndef TRAINLOG_BLOCKS_H
#define TRAINLOG_BLOCKS_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Growable arrays: a pass collects its findings in them without the interpreter (it may run on a
 * thread of its own), and they become Python lists only once it is done. */

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

static PyObject *
offsets_list(const Offsets *array)
{
    PyObject *list = PyList_New(array->count);
    if (list == NULL) return NULL;
    for (Py_ssize_t i = 0; i < array->count; i++) {
        PyObject *number = PyLong_FromLongLong(array->items[i]);
        if (number == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, number);
    }
    return list;
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

#endif
