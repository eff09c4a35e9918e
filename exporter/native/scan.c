/* Kernel: one pass over a block counts its newlines and finds the lines holding any anchor.
 *
 * Its pure-Python twin, exporter/native/scan.py, defines what it returns; tests/test_native.py
 * checks both on generated, fuzzed and cut blocks. It takes bytes, the offset of each anchor's
 * fingerprint and a byte commonness table, and returns (newlines, starts, prefixed): plain
 * numbers and lists, nothing of the package. Which three bytes of an anchor are its
 * fingerprint, and how common a byte is in log text, is decided in scan.py.
 *
 * Candidates come from a SIMD fingerprint test in the manner of Hyperscan's and the Rust
 * aho-corasick crate's "Teddy": each anchor contributes three consecutive bytes to one of
 * sixteen buckets ("fat" Teddy: two sets of eight); per 32 bytes, nibble lookup tables
 * (pshufb) tell which positions may start a fingerprint of which bucket. Such a candidate
 * passes per-byte tables, then a hash table of the fingerprints names the anchors to
 * compare with memcmp: a busy bucket's anchors are never walked one by one. Without AVX2
 * the same tables are used one byte at a time.
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

#include "blocks.h"

/* The offsets as a list of ints (scan.c's passes: a block's anchored lines, few beside its step lines). */
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

#define BUCKETS 16 /* two AVX2 table sets of eight: a bucket is a bit of a byte */

#define FINGERPRINT 3

/* ------------------------------------------------------------------------------------------ */
/* Scanner                                                                                    */

typedef struct {
    const uint8_t *bytes;
    Py_ssize_t length;
    Py_ssize_t offset; /* where the fingerprint starts inside the anchor */
    uint32_t fingerprint; /* its bytes, as load_fingerprint reads them */
    Py_ssize_t next; /* the next anchor with the same fingerprint, or -1 */
} Anchor;

/* Open addressing, linear probing; a fingerprint has 24 bits, so EMPTY is no fingerprint. */
#define EMPTY UINT32_MAX
typedef struct {
    uint32_t fingerprint;
    Py_ssize_t first; /* its first anchor; Anchor.next chains the others */
} Slot;

typedef struct {
    PyObject_HEAD
    PyObject *anchors;       /* tuple of bytes, kept alive: Anchor.bytes points into them */
    PyObject *line_starts;   /* tuple of bytes: reported when a line begins with one */
    int simd;                /* use the AVX2 loop where the CPU has it (tests turn it off) */
    int breaks;              /* an anchor or line start holds \r or \n: no scan_segments */
    Py_ssize_t jobs;         /* the passes ahead (Ahead) using its tables: it is not initialised again meanwhile */
    Anchor *table;
    Py_ssize_t count;
    Slot *slots; /* fingerprint -> anchors, a quarter full at most */
    size_t slot_mask;
    uint16_t exact[FINGERPRINT][256]; /* bucket bits per fingerprint byte */
    /* nibble tables of buckets 0-7 and 8-15, each repeated in both AVX2 lanes */
    uint8_t low[2][FINGERPRINT][32], high[2][FINGERPRINT][32];
} Scanner;

static inline uint32_t
load_fingerprint(const uint8_t *at)
{
    return (uint32_t)at[0] | (uint32_t)at[1] << 8 | (uint32_t)at[2] << 16;
}

/* A bucket's nibble tables match every byte whose low nibble and high nibble each belong to
 * one of its fingerprints: the more combinations, and the more common their bytes, the more
 * positions are candidates for nothing. */
typedef struct {
    uint16_t low[FINGERPRINT], high[FINGERPRINT]; /* nibble sets */
    int alive;
} Group;

/* How common each byte is in log text, by its nibbles: [high][low]. */
typedef double Commonness[16][16];

static double
group_cost(const Group *group, const Commonness *commonness)
{
    double cost = 1;
    for (int i = 0; i < FINGERPRINT; i++) {
        double matched = 0;
        for (unsigned highs = group->high[i]; highs; highs &= highs - 1) {
            for (unsigned lows = group->low[i]; lows; lows &= lows - 1) {
                matched += (*commonness)[__builtin_ctz(highs)][__builtin_ctz(lows)];
            }
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
assign_buckets(const Anchor *table, Py_ssize_t count, const Commonness *commonness, int *bucket_of)
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
        cost[a] = group_cost(&groups[a], commonness);
        group_of[a] = a;
    }
    for (Py_ssize_t a = 0; a < count; a++) {
        for (Py_ssize_t b = a + 1; b < count; b++) {
            Group both = merged(&groups[a], &groups[b]);
            delta[a * count + b] = group_cost(&both, commonness) - cost[a] - cost[b];
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
        cost[best_a] = group_cost(&groups[best_a], commonness);
        for (Py_ssize_t anchor = 0; anchor < count; anchor++) {
            if (group_of[anchor] == best_b) group_of[anchor] = best_a;
        }
        for (Py_ssize_t other = 0; other < count; other++) {
            if (other == best_a || !groups[other].alive) continue;
            Group both = merged(&groups[best_a], &groups[other]);
            Py_ssize_t a = other < best_a ? other : best_a, b = other < best_a ? best_a : other;
            delta[a * count + b] = group_cost(&both, commonness) - cost[best_a] - cost[other];
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
    PyMem_Free(self->slots);
    PyMem_Free(self->table);
    Py_XDECREF(self->anchors);
    Py_XDECREF(self->line_starts);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The fingerprint offsets, one per anchor, each leaving three bytes of it; -1 on error. */
static int
read_offsets(Anchor *table, Py_ssize_t count, PyObject *offsets)
{
    PyObject *tuple = PySequence_Tuple(offsets);
    if (tuple == NULL) return -1;
    int failed = PyTuple_GET_SIZE(tuple) != count;
    for (Py_ssize_t i = 0; !failed && i < count; i++) {
        Py_ssize_t offset = PyLong_AsSsize_t(PyTuple_GET_ITEM(tuple, i));
        if (offset == -1 && PyErr_Occurred()) {
            Py_DECREF(tuple);
            return -1;
        }
        failed = offset < 0 || offset + FINGERPRINT > table[i].length;
        table[i].offset = offset;
        table[i].fingerprint = failed ? 0 : load_fingerprint(table[i].bytes + offset);
    }
    Py_DECREF(tuple);
    if (failed) PyErr_SetString(PyExc_ValueError, "offsets: one per anchor, each leaving three bytes of it");
    return failed ? -1 : 0;
}

static inline size_t
slot_of(uint32_t fingerprint, size_t mask)
{
    return (size_t)((fingerprint * 2654435761u) >> 8) & mask; /* Knuth's multiplicative hash */
}

/* The fingerprint table of ``table``, with each anchor chained to the next of its fingerprint. */
static Slot *
fingerprint_slots(Anchor *table, Py_ssize_t count, size_t *mask)
{
    size_t size = 16;
    while (size < (size_t)count * 4) size *= 2;
    Slot *slots = PyMem_Malloc(size * sizeof(Slot));
    if (slots == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (size_t i = 0; i < size; i++) slots[i] = (Slot){EMPTY, -1};
    /* Last to first, so that each chain lists its anchors in the given order. */
    for (Py_ssize_t index = count - 1; index >= 0; index--) {
        size_t slot = slot_of(table[index].fingerprint, size - 1);
        while (slots[slot].fingerprint != EMPTY && slots[slot].fingerprint != table[index].fingerprint) {
            slot = (slot + 1) & (size - 1);
        }
        slots[slot].fingerprint = table[index].fingerprint;
        table[index].next = slots[slot].first;
        slots[slot].first = index;
    }
    *mask = size - 1;
    return slots;
}

static int
read_commonness(Commonness *commonness, PyObject *bytes)
{
    if (!PyBytes_Check(bytes) || PyBytes_GET_SIZE(bytes) != 256) {
        PyErr_SetString(PyExc_ValueError, "commonness must be 256 bytes, one per byte value");
        return -1;
    }
    const uint8_t *values = (const uint8_t *)PyBytes_AS_STRING(bytes);
    for (int byte = 0; byte < 256; byte++) (*commonness)[byte >> 4][byte & 15] = values[byte];
    return 0;
}

static int
holds_line_break(PyObject *bytes)
{
    const char *at = PyBytes_AS_STRING(bytes);
    size_t size = (size_t)PyBytes_GET_SIZE(bytes);
    return memchr(at, '\r', size) != NULL || memchr(at, '\n', size) != NULL;
}

static int
Scanner_init(Scanner *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"anchors", "line_starts", "offsets", "commonness", "simd", NULL};
    PyObject *anchors, *line_starts = NULL, *offsets = NULL, *commonness_bytes = NULL;
    int simd = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O$OOp", keywords, &anchors, &line_starts, &offsets,
                                     &commonness_bytes, &simd)) {
        return -1;
    }
    if (offsets == NULL || commonness_bytes == NULL) {
        PyErr_SetString(PyExc_TypeError, "offsets and commonness are required (exporter/native/scan.py)");
        return -1;
    }
    if (self->jobs) {
        PyErr_SetString(PyExc_RuntimeError, "a scanner scanning ahead is not initialised again");
        return -1;
    }
    /* A scanner initialised again keeps its anchors, and the table pointing into them, until
     * the new ones are all read: a failure leaves it as it was. */
    PyObject *tuple = PySequence_Tuple(anchors);
    if (tuple == NULL) return -1;
    PyObject *starts = line_starts ? PySequence_Tuple(line_starts) : PyTuple_New(0);
    if (starts == NULL) {
        Py_DECREF(tuple);
        return -1;
    }
    Anchor *table = NULL;
    int *bucket_of = NULL;
    Commonness commonness;
    Py_ssize_t count = PyTuple_GET_SIZE(tuple);
    if (count == 0) {
        PyErr_SetString(PyExc_ValueError, "anchors must not be empty");
        goto fail;
    }
    int breaks = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(starts); i++) {
        PyObject *start = PyTuple_GET_ITEM(starts, i);
        if (!PyBytes_Check(start)) {
            PyErr_SetString(PyExc_TypeError, "line_starts must be bytes");
            goto fail;
        }
        breaks |= holds_line_break(start);
    }
    if (read_commonness(&commonness, commonness_bytes) < 0) goto fail;
    table = PyMem_Calloc(count, sizeof(Anchor));
    bucket_of = PyMem_Calloc(count, sizeof(int));
    if (table == NULL || bucket_of == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyTuple_GET_ITEM(tuple, i);
        if (!PyBytes_Check(item) || PyBytes_GET_SIZE(item) < FINGERPRINT) {
            PyErr_SetString(PyExc_ValueError, "anchors must be bytes of three bytes at least");
            goto fail;
        }
        table[i].bytes = (const uint8_t *)PyBytes_AS_STRING(item);
        table[i].length = PyBytes_GET_SIZE(item);
        breaks |= holds_line_break(item);
    }
    if (read_offsets(table, count, offsets) < 0 || assign_buckets(table, count, &commonness, bucket_of) < 0) goto fail;
    size_t slot_mask;
    Slot *slots = fingerprint_slots(table, count, &slot_mask);
    if (slots == NULL) goto fail;
    PyMem_Free(self->slots);
    self->slots = slots;
    self->slot_mask = slot_mask;
    memset(self->exact, 0, sizeof(self->exact));
    memset(self->low, 0, sizeof(self->low));
    memset(self->high, 0, sizeof(self->high));
    for (Py_ssize_t index = 0; index < count; index++) {
        int bucket = bucket_of[index], set = bucket / 8;
        uint8_t bit = (uint8_t)(1u << bucket % 8);
        const Anchor *anchor = &table[index];
        for (int i = 0; i < FINGERPRINT; i++) {
            uint8_t byte = anchor->bytes[anchor->offset + i];
            self->exact[i][byte] |= (uint16_t)(1u << bucket);
            self->low[set][i][byte & 15] |= bit;
            self->low[set][i][16 + (byte & 15)] |= bit;
            self->high[set][i][byte >> 4] |= bit;
            self->high[set][i][16 + (byte >> 4)] |= bit;
        }
    }
    PyMem_Free(bucket_of);
    PyMem_Free(self->table);
    self->table = table;
    self->count = count;
    self->simd = simd;
    self->breaks = breaks;
    Py_XSETREF(self->anchors, tuple);
    Py_XSETREF(self->line_starts, starts);
    return 0;
fail:
    PyMem_Free(table);
    PyMem_Free(bucket_of);
    Py_DECREF(tuple);
    Py_DECREF(starts);
    return -1;
}

typedef struct {
    const uint8_t *data;
    Py_ssize_t length;
    Py_ssize_t newlines;
    Py_ssize_t line_end; /* end (after the newline) of the last line reported */
    int segments; /* a carriage return ends a line too (scan_segments) */
    Offsets starts;
    Offsets prefixed;
    Py_ssize_t carriage; /* segments: the first \r at or after ``carriage_from`` (length: none) */
    Py_ssize_t carriage_from; /* 0 and carriage 0: not looked for yet */
} ScanState;

/* The first \r or \n at or after ``start`` (NULL: none): the next \r kept from the last search, which it bounds the
 * newline's, so that a long line of redraws (no newline) and a block of lines without carriage returns each cost
 * what the block holds, not a search to its end a line. */
static const uint8_t *
segment_end(ScanState *state, Py_ssize_t start)
{
    const uint8_t *data = state->data;
    if (state->carriage < start || (state->carriage == 0 && state->carriage_from == 0)) {
        const uint8_t *carriage = memchr(data + start, '\r', (size_t)(state->length - start));
        state->carriage = carriage ? carriage - data : state->length;
        state->carriage_from = start;
    }
    const uint8_t *newline = memchr(data + start, '\n', (size_t)(state->carriage - start));
    return newline ? newline : state->carriage < state->length ? data + state->carriage : NULL;
}

/* Report the line holding the anchor that starts at ``start``. */
static int
report_line(const Scanner *self, ScanState *state, Py_ssize_t start)
{
    const uint8_t *data = state->data;
    const uint8_t *from = data + state->line_end;
    const uint8_t *before = start > state->line_end ? memrchr(from, '\n', (size_t)(start - state->line_end)) : NULL;
    const uint8_t *after;
    if (state->segments) { /* the nearest carriage return on either side, if one is nearer than the newline */
        const uint8_t *segment = before ? before + 1 : from;
        const uint8_t *carriage = data + start > segment ? memrchr(segment, '\r', (size_t)(data + start - segment)) : NULL;
        before = carriage ? carriage : before;
        after = segment_end(state, start);
    } else {
        after = memchr(data + start, '\n', (size_t)(state->length - start));
    }
    Py_ssize_t line = before ? before - data + 1 : state->line_end;
    state->line_end = after ? after - data + 1 : state->length;
    if (push_offset(&state->starts, line) < 0) return -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->line_starts); i++) {
        PyObject *prefix = PyTuple_GET_ITEM(self->line_starts, i);
        Py_ssize_t size = PyBytes_GET_SIZE(prefix);
        if (size <= state->line_end - line && memcmp(data + line, PyBytes_AS_STRING(prefix), (size_t)size) == 0) {
            return push_offset(&state->prefixed, line);
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
    if (!(buckets & self->exact[0][at[0]] & self->exact[1][at[1]] & self->exact[2][at[2]])) return 0;
    uint32_t fingerprint = load_fingerprint(at);
    size_t slot = slot_of(fingerprint, self->slot_mask);
    while (self->slots[slot].fingerprint != fingerprint) {
        if (self->slots[slot].fingerprint == EMPTY) return 0;
        slot = (slot + 1) & self->slot_mask;
    }
    for (Py_ssize_t index = self->slots[slot].first; index >= 0; index = self->table[index].next) {
        const Anchor *anchor = &self->table[index];
        Py_ssize_t start = position - anchor->offset;
        if (start >= 0 && start + anchor->length <= state->length
            && memcmp(state->data + start, anchor->bytes, (size_t)anchor->length) == 0) {
            return report_line(self, state, start);
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
/* The low and high nibbles of 32 bytes, ready to index the tables. */
typedef struct {
    __m256i low, high;
} Nibbles;

__attribute__((target("avx2"))) static inline Nibbles
nibbles_of(__m256i bytes, __m256i nibble_mask)
{
    return (Nibbles){_mm256_and_si256(bytes, nibble_mask), _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble_mask)};
}

/* Per byte, the buckets of one table set whose fingerprints may start there. */
__attribute__((target("avx2"))) static inline __m256i
buckets_at(const __m256i low[FINGERPRINT], const __m256i high[FINGERPRINT], const Nibbles at[FINGERPRINT])
{
    __m256i buckets = _mm256_and_si256(_mm256_shuffle_epi8(low[0], at[0].low), _mm256_shuffle_epi8(high[0], at[0].high));
    for (int i = 1; i < FINGERPRINT; i++) {
        buckets = _mm256_and_si256(buckets, _mm256_and_si256(_mm256_shuffle_epi8(low[i], at[i].low),
                                                             _mm256_shuffle_epi8(high[i], at[i].high)));
    }
    return buckets;
}

__attribute__((target("avx2"))) static inline int
verify_lanes(const Scanner *self, ScanState *state, Py_ssize_t position, __m256i first, __m256i second, __m256i zero)
{
    unsigned candidates = ~(unsigned)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_or_si256(first, second), zero));
    if (candidates == 0) return 0;
    uint8_t lanes[2][32];
    _mm256_storeu_si256((__m256i *)lanes[0], first);
    _mm256_storeu_si256((__m256i *)lanes[1], second);
    while (candidates) {
        int lane = __builtin_ctz(candidates);
        candidates &= candidates - 1;
        if (verify(self, state, position + lane, lanes[0][lane] | (unsigned)lanes[1][lane] << 8) < 0) return -1;
    }
    return 0;
}

/* Newline bytes counted as per-byte counters (0 - compare mask), summed before they can wrap. */
__attribute__((target("avx2"))) static inline Py_ssize_t
sum_counters(__m256i counters)
{
    __m256i sums = _mm256_sad_epu8(counters, _mm256_setzero_si256());
    return (Py_ssize_t)(_mm256_extract_epi64(sums, 0) + _mm256_extract_epi64(sums, 1) + _mm256_extract_epi64(sums, 2)
                        + _mm256_extract_epi64(sums, 3));
}

/* 32 positions at a time; returns where the byte-wise scan has to take over. */
__attribute__((target("avx2"))) static Py_ssize_t
scan_avx2(const Scanner *self, ScanState *state)
{
    const uint8_t *data = state->data;
    const Py_ssize_t length = state->length;
    const __m256i nibble_mask = _mm256_set1_epi8(0x0f);
    const __m256i newline = _mm256_set1_epi8('\n');
    const __m256i zero = _mm256_setzero_si256();
    /* Loaded once: the loop must not reload them after every store to the state. */
    __m256i low[2][FINGERPRINT], high[2][FINGERPRINT];
    for (int set = 0; set < 2; set++) {
        for (int i = 0; i < FINGERPRINT; i++) {
            low[set][i] = _mm256_loadu_si256((const __m256i *)self->low[set][i]);
            high[set][i] = _mm256_loadu_si256((const __m256i *)self->high[set][i]);
        }
    }
    __m256i counters = zero;
    int rounds = 0;
    Py_ssize_t newlines = 0, position = 0;
    for (; position + 32 + FINGERPRINT - 1 <= length; position += 32) {
        const uint8_t *at = data + position;
        Nibbles nibbles[FINGERPRINT];
        for (int i = 0; i < FINGERPRINT; i++) {
            __m256i bytes = _mm256_loadu_si256((const __m256i *)(at + i));
            if (i == 0) counters = _mm256_sub_epi8(counters, _mm256_cmpeq_epi8(bytes, newline));
            nibbles[i] = nibbles_of(bytes, nibble_mask);
        }
        if (++rounds == 255) { /* at most 1 a round per byte counter: 255 fits */
            newlines += sum_counters(counters);
            counters = zero;
            rounds = 0;
        }
        __m256i first = buckets_at(low[0], high[0], nibbles), second = buckets_at(low[1], high[1], nibbles);
        __m256i any = _mm256_or_si256(first, second);
        if (!_mm256_testz_si256(any, any) && verify_lanes(self, state, position, first, second, zero) < 0) return -1;
    }
    state->newlines += newlines + sum_counters(counters);
    return position;
}

static int have_avx2;
#endif

PyDoc_STRVAR(Scanner_scan_doc,
"scan(data) -> (newlines, starts, prefixed)\n\n"
"The number of newlines in ``data``, the start offsets of the lines holding an anchor\n"
"(ascending, each once), and those of them that begin with one of ``line_starts``.");

/* The scan of ``state``'s block into its arrays, without the interpreter; -1 when memory ran out. */
static int
scan_block(const Scanner *self, ScanState *state)
{
    Py_ssize_t from = 0;
#ifdef HAVE_AVX2_SCAN
    if (have_avx2 && self->simd && (from = scan_avx2(self, state)) < 0) return -1;
#endif
    return scan_bytewise(self, state, from);
}

static PyObject *
scan_result(const ScanState *state)
{
    PyObject *starts = offsets_list(&state->starts), *prefixed = offsets_list(&state->prefixed), *result = NULL;
    if (starts != NULL && prefixed != NULL) result = Py_BuildValue("nOO", state->newlines, starts, prefixed);
    Py_XDECREF(starts);
    Py_XDECREF(prefixed);
    return result;
}

static void
scan_state_free(ScanState *state)
{
    free(state->starts.items);
    free(state->prefixed.items);
}

static PyObject *
scan_lines(Scanner *self, PyObject *argument, int segments)
{
    Py_buffer view;
    if (PyObject_GetBuffer(argument, &view, PyBUF_SIMPLE) < 0) return NULL;
    ScanState state = {view.buf, view.len, 0, 0, segments, {0}, {0}};
    PyObject *result = scan_block(self, &state) < 0 ? PyErr_NoMemory() : scan_result(&state);
    scan_state_free(&state);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *
Scanner_scan(Scanner *self, PyObject *argument)
{
    return scan_lines(self, argument, 0);
}

PyDoc_STRVAR(Scanner_scan_segments_doc,
"scan_segments(data) -> (newlines, starts, prefixed)\n\n"
"As scan(data.replace(b'\\r', b'\\n')) without the copy: a carriage return ends a line too (the anchors hold\n"
"neither); newlines counts the newlines of ``data``.");

static PyObject *
Scanner_scan_segments(Scanner *self, PyObject *argument)
{
    if (self->breaks) {
        PyErr_SetString(PyExc_ValueError, "scan_segments: an anchor or line start holds a line break");
        return NULL;
    }
    return scan_lines(self, argument, 1);
}

static PyObject *
Scanner_get_anchors(Scanner *self, void *closure)
{
    return Py_NewRef(self->anchors);
}

static PyMethodDef Scanner_methods[] = {
    {"scan", (PyCFunction)Scanner_scan, METH_O, Scanner_scan_doc},
    {"scan_segments", (PyCFunction)Scanner_scan_segments, METH_O, Scanner_scan_segments_doc},
    {NULL},
};

static PyGetSetDef Scanner_getset[] = {
    {"anchors", (getter)Scanner_get_anchors, NULL, "The anchors, as given.", NULL},
    {NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "exporter.native._scan.Scanner",
    .tp_doc = PyDoc_STR("Scanner(anchors, line_starts=(), *, simd=True): finds the lines of a block holding any anchor."),
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Scanner_init,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_methods = Scanner_methods,
    .tp_getset = Scanner_getset,
};

/* ------------------------------------------------------------------------------------------ */

/* Non-overlapping occurrences of ``literal`` (not empty) in at[0:size], as bytes.count. */
static Py_ssize_t
occurrences(const char *at, Py_ssize_t size, const char *literal, Py_ssize_t length)
{
    Py_ssize_t found = 0;
    for (const char *match = at, *end = at + size; (match = find_literal(match, end - match, literal, length)) != NULL;
         match += length) {
        found++;
    }
    return found;
}

PyDoc_STRVAR(count_starts_doc,
"count_starts(data, prefix, literal) -> (lines beginning with prefix, occurrences of literal, newlines)\n\n"
"Non-overlapping occurrences, as bytes.count; neither may be empty.");

static PyObject *
count_starts(PyObject *module, PyObject *args)
{
    Py_buffer data, prefix, literal;
    if (!PyArg_ParseTuple(args, "y*y*y*:count_starts", &data, &prefix, &literal)) return NULL;
    PyObject *result = NULL;
    if (prefix.len == 0 || literal.len == 0) {
        PyErr_SetString(PyExc_ValueError, "prefix and literal must not be empty");
        goto done;
    }
    const char *at = data.buf, *end = at + data.len;
    Py_ssize_t starting = 0, newlines = 0;
    for (const char *line = at; line < end; newlines++) { /* counted once its newline is found */
        if (end - line >= prefix.len && memcmp(line, prefix.buf, prefix.len) == 0) starting++;
        const char *newline = memchr(line, '\n', end - line);
        if (newline == NULL) break;
        line = newline + 1;
    }
    result = Py_BuildValue("nnn", starting, occurrences(at, data.len, literal.buf, literal.len), newlines);
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&prefix);
    PyBuffer_Release(&literal);
    return result;
}

/* ------------------------------------------------------------------------------------------ */
/* Lines grouped by their prefix (an interleaved console's streams)                           */

PyDoc_STRVAR(group_lines_doc,
"group_lines(data, literal, tag_open, tag_close, loose_starts) -> (prefixes, lines, starts, loose, tagged) | None\n\n"
"The newline-terminated lines of ``data`` grouped by their prefix (tags ``open name close``, each with one\n"
"space after it, stacked; b'': none), groups in order of first appearance: each group's line count, and\n"
"where the text after the prefix starts on its lines holding ``literal`` there (none when it is empty).\n"
"``loose``: lines without a prefix beginning with a byte of ``loose_starts``; ``tagged``: lines holding a tag\n"
"after their prefix.\n"
"None: more than 64 prefixes. See exporter/native/scan.py.");

static PyObject *
group_lines(PyObject *module, PyObject *args)
{
    Py_buffer data, literal, open, close, loose_starts;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*:group_lines", &data, &literal, &open, &close, &loose_starts)) return NULL;
    PyObject *result = NULL;
    Groups *found = calloc(1, sizeof(Groups));
    if (found == NULL) {
        PyErr_NoMemory();
    } else if (check_group_arguments(&open, &close) == 0) {
        result = find_groups(data.buf, data.len, &literal, &open, &close, &loose_starts, found) < 0 ? PyErr_NoMemory()
                                                                                                   : groups_result(found);
    }
    if (found != NULL) groups_free(found);
    free(found);
    PyBuffer_Release(&data);
    PyBuffer_Release(&literal);
    PyBuffer_Release(&open);
    PyBuffer_Release(&close);
    PyBuffer_Release(&loose_starts);
    return result;
}

/* ------------------------------------------------------------------------------------------ */
/* Records on carriage-return segments: scan.py's segment_records defines them.               */

#include "decimal.h"

#define MAX_VALUE_BYTES 64
#define MAX_FRACTION_DIGITS 18

static int
is_value_byte(uint8_t byte)
{
    return (byte >= '0' && byte <= '9') || (byte >= 'A' && byte <= 'Z') || (byte >= 'a' && byte <= 'z') || byte == '.'
           || byte == '+' || byte == '-';
}

static int
is_blank_byte(uint8_t byte)
{
    return byte == ' ' || byte == '\t' || byte == '\x0b' || byte == '\x0c';
}

static int
is_digit_byte(uint8_t byte)
{
    return byte >= '0' && byte <= '9';
}

/* float() of a value's bytes: 1 and *value, 0 when it is no number. */
static int
value_of(const uint8_t *at, Py_ssize_t length, double *value)
{
    if (simple_decimal(at, at + length, value)) return 1;
    char text[MAX_VALUE_BYTES + 1];
    memcpy(text, at, (size_t)length);
    text[length] = '\0';
    char *end = NULL;
    double number = PyOS_string_to_double(text, &end, NULL);
    if (end != text + length || (number == -1.0 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *value = number;
    return 1;
}

/* The digits of at[0:length] (at most MAX_FRACTION_DIGITS): an int64. */
static long long
digits_value(const uint8_t *at, Py_ssize_t length)
{
    long long number = 0;
    for (Py_ssize_t i = 0; i < length; i++) number = number * 10 + (at[i] - '0');
    return number;
}

/* The last D/T + close of data[begin:end]: 1 with *step and *total, 0 without. */
static int
last_fraction(const uint8_t *data, Py_ssize_t begin, Py_ssize_t end, const uint8_t *close, Py_ssize_t close_length,
              long long *step, long long *total)
{
    for (Py_ssize_t at = end - 1; at >= begin; at--) {
        if (data[at] == close[0] && at + close_length <= end && same_bytes(data + at, close, close_length)) {
            Py_ssize_t digits = at;
            while (digits > begin && is_digit_byte(data[digits - 1])) digits--;
            Py_ssize_t slash = digits - 1;
            if (at - digits >= 1 && at - digits <= MAX_FRACTION_DIGITS && slash > begin && data[slash] == '/') {
                Py_ssize_t first = slash;
                while (first > begin && is_digit_byte(data[first - 1])) first--;
                if (slash - first >= 1 && slash - first <= MAX_FRACTION_DIGITS && (first == begin || data[first - 1] < 0x80)) {
                    *step = digits_value(data + first, slash - first);
                    *total = digits_value(data + digits, at - digits);
                    return 1;
                }
            }
        }
        if (data[at] == '/' && at > begin && (is_digit_byte(data[at - 1]) || data[at - 1] >= 0x80)) return 0;
    }
    return 0;
}

/* The record at ``at`` (after a carriage return; or after what its line holds before it, when that holds no ``\r``,
 * ``/`` or ``{``: no fraction, -1 for both), on the line starting at ``line``: 1 with its fraction and values, 0 when
 * there is none. The values of the bits of ``digits`` are digits only (1 to MAX_FRACTION_DIGITS). */
/* The length of a value read without its padding: up to its first '.' when it begins with nan or inf after signs
 * (``nan.0``), else all of it. */
static Py_ssize_t
unpadded_length(const uint8_t *at, Py_ssize_t length)
{
    Py_ssize_t word = 0;
    while (word < length && (at[word] == '+' || at[word] == '-')) word++;
    if (length - word < 3) return length;
    char first[3];
    for (int i = 0; i < 3; i++) first[i] = (char)(at[word + i] | 0x20);
    if (memcmp(first, "nan", 3) != 0 && memcmp(first, "inf", 3) != 0) return length;
    const uint8_t *dot = memchr(at, '.', (size_t)length);
    return dot == NULL ? length : dot - at;
}

/* Past the record of ``count`` pieces at ``at`` (scan.py's _values_at), its values in ``values``; -1 when there is
 * none. ``padded``: bar_records' values. */
static Py_ssize_t
values_at(const uint8_t *data, Py_ssize_t size, Py_ssize_t at, Py_buffer *pieces, Py_ssize_t count,
          unsigned long long digits, int padded, double *values)
{
    Py_ssize_t position = at + pieces[0].len;
    for (Py_ssize_t piece = 1; piece < count; piece++) {
        Py_ssize_t end = position;
        while (end < size && is_value_byte(data[end])) end++;
        Py_ssize_t length = end - position;
        if (length < 1 || length > MAX_VALUE_BYTES || size - end < pieces[piece].len
            || !same_bytes(data + end, pieces[piece].buf, pieces[piece].len)) {
            return -1;
        }
        if (piece <= 64 && (digits >> (piece - 1) & 1)) {
            if (length > MAX_FRACTION_DIGITS) return -1;
            for (Py_ssize_t byte = position; byte < end; byte++) {
                if (!is_digit_byte(data[byte])) return -1;
            }
        }
        if (padded) length = unpadded_length(data + position, length);
        if (!value_of(data + position, length, &values[piece - 1])) return -1;
        position = end + pieces[piece].len;
    }
    return position;
}

static Py_ssize_t
past_blanks(const uint8_t *data, Py_ssize_t size, Py_ssize_t position)
{
    while (position < size && is_blank_byte(data[position])) position++;
    return position;
}

static int
record_at(const uint8_t *data, Py_ssize_t size, Py_ssize_t line, Py_ssize_t at, Py_buffer *pieces, Py_ssize_t count,
          const uint8_t *close, Py_ssize_t close_length, unsigned long long digits, long long *step, long long *total,
          double *values)
{
    Py_ssize_t position = values_at(data, size, at, pieces, count, digits, 0, values);
    if (position < 0) return 0;
    position = past_blanks(data, size, position); /* a terminal's padding */
    if (position >= size || data[position] != '\n') return 0;
    if (at == line || data[at - 1] != '\r') {
        for (Py_ssize_t byte = line; byte < at; byte++) {
            if (data[byte] == '\r' || data[byte] == '/' || data[byte] == '{') return 0;
        }
        *step = *total = -1;
        return 1;
    }
    Py_ssize_t cut = at - 1, begin;
    for (;;) { /* the segments before, back to the first not blank (memrchr: a bar's segment is long) */
        const uint8_t *carriage = memrchr(data + line, '\r', (size_t)(cut - line));
        begin = carriage == NULL ? line : carriage + 1 - data;
        Py_ssize_t byte = begin;
        while (byte < cut && is_blank_byte(data[byte])) byte++;
        if (byte < cut) break;
        if (begin == line) return 0;
        cut = begin - 1;
    }
    return last_fraction(data, begin, cut, close, close_length, step, total);
}

PyDoc_STRVAR(segment_records_doc,
"segment_records(data, pieces, close, digits=0) -> (newlines, continued, starts, lines, steps, totals, columns)\n\n"
"Records on carriage-return segments and the fraction before each. See exporter/native/scan.py.");

typedef struct {
    Py_ssize_t newlines;
    Offsets continued, starts, lines, steps, totals;
    Offsets ends, leads; /* bar_records' */
    Doubles values; /* count - 1 a record */
} Records;

typedef struct Prefixes Prefixes;
static int prefixed_line(const uint8_t *line, const uint8_t *end, Prefixes *prefixes);

/* The start of the line holding each of ascending offsets, each byte looked at once (a line of redraws is long). */
typedef struct {
    Py_ssize_t line, searched; /* the last line start found, and up to where it was looked for */
} LineStart;

static Py_ssize_t
line_start_at(const uint8_t *bytes, LineStart *state, Py_ssize_t at)
{
    const uint8_t *newline = at > state->searched ? memrchr(bytes + state->searched, '\n', (size_t)(at - state->searched)) : NULL;
    if (newline != NULL) state->line = newline + 1 - bytes;
    if (at > state->searched) state->searched = at;
    return state->line;
}

/* The newlines of data[0:size] and its lines ending in \r into ``found``, with ``prefixes`` their prefixes too; -1 when
 * memory ran out. */
static int
walk_lines(const uint8_t *bytes, Py_ssize_t size, Records *found, Prefixes *prefixes)
{
    const uint8_t *end = bytes + size;
    for (const uint8_t *line = bytes;;) {
        if (prefixes != NULL && prefixed_line(line, end, prefixes) < 0) return -1;
        const uint8_t *newline = memchr(line, '\n', (size_t)(end - line));
        if (newline == NULL) break;
        found->newlines++;
        if (newline > line && newline[-1] == '\r' && push_offset(&found->continued, line - bytes) < 0) return -1;
        line = newline + 1;
    }
    return 0;
}

/* The records of data[0:size] by ``count`` pieces into ``found``, without the interpreter; -1 when memory ran out.
 * With ``prefixes``, the walk over the lines notes their prefixes too (find_prefixes' first part: one walk where the
 * passes of a block take both). */
static int
find_records(const uint8_t *bytes, Py_ssize_t size, Py_buffer *pieces, Py_ssize_t count, const uint8_t *close,
             Py_ssize_t close_length, unsigned long long digits, double *values, Records *found, Prefixes *prefixes)
{
    if (walk_lines(bytes, size, found, prefixes) < 0) return -1;
    LineStart line_start = {0, 0};
    for (const uint8_t *match = find_literal(bytes, size, pieces[0].buf, pieces[0].len); match != NULL;
         match = find_literal(match + 1, bytes + size - match - 1, pieces[0].buf, pieces[0].len)) {
        long long step, total;
        Py_ssize_t at = match - bytes;
        Py_ssize_t line = line_start_at(bytes, &line_start, at);
        if (!record_at(bytes, size, line, at, pieces, count, close, close_length, digits, &step, &total, values)) {
            continue;
        }
        if (push_offset(&found->starts, at) < 0 || push_offset(&found->lines, line) < 0
            || push_offset(&found->steps, step) < 0 || push_offset(&found->totals, total) < 0) {
            return -1;
        }
        for (Py_ssize_t i = 0; i < count - 1; i++) {
            if (push_double(&found->values, values[i]) < 0) return -1;
        }
    }
    return 0;
}

/* Past the ASCII digits at ``position`` (before ``end``); their number in *number when they are 1 to
 * MAX_FRACTION_DIGITS, else -1 there. */
static Py_ssize_t
digits_at(const uint8_t *data, Py_ssize_t position, Py_ssize_t end, long long *number)
{
    Py_ssize_t after = position;
    while (after < end && is_digit_byte(data[after])) after++;
    *number = after > position && after - position <= MAX_FRACTION_DIGITS ? digits_value(data + position, after - position) : -1;
    return after;
}

/* The bar whose segment starts at ``at`` with the lead (scan.py's _bar_at): 1 with its segment's end, L, D, T and
 * values; 0 when there is none. */
static int
bar_at(const uint8_t *data, Py_ssize_t size, Py_ssize_t at, Py_ssize_t lead_length, Py_buffer *pieces,
       Py_ssize_t count, unsigned long long digits, Py_ssize_t *end, long long *numbers, double *values)
{
    Py_ssize_t cut = at;
    while (cut < size && data[cut] != '\r' && data[cut] != '\n') cut++;
    if (cut == size) return 0;
    *end = cut;
    Py_ssize_t position = digits_at(data, at + lead_length, cut, &numbers[0]);
    if (numbers[0] < 0 || position >= cut || data[position] != ':') return 0;
    Py_ssize_t percent = past_blanks(data, cut, position + 1);
    long long ignored;
    position = digits_at(data, percent, cut, &ignored);
    if (position == percent || cut - position < 2 || data[position] != '%' || data[position + 1] != '|') return 0;
    const uint8_t *bar = memchr(data + position + 2, '|', (size_t)(cut - position - 2));
    if (bar == NULL) return 0;
    position = digits_at(data, past_blanks(data, cut, bar + 1 - data), cut, &numbers[1]);
    if (numbers[1] < 0 || position >= cut || data[position] != '/') return 0;
    position = digits_at(data, position + 1, cut, &numbers[2]);
    if (numbers[2] < 0 || cut - position < 2 || data[position] != ' ' || data[position + 1] != '[') return 0;
    const uint8_t *record = find_literal(data + position + 2, cut - position - 2, pieces[0].buf, pieces[0].len);
    if (record == NULL) return 0;
    for (const uint8_t *byte = data + position; byte < record; byte++) {
        if (*byte == ']' || *byte == '=') return 0;
    }
    position = values_at(data, size, record - data, pieces, count, digits, 1, values);
    return position >= 0 && past_blanks(data, size, position) == cut;
}

/* The bars of data[0:size] into ``found`` (newlines and continued lines by find_records' walk, done before); -1 when
 * memory ran out. */
static int
find_bars(const uint8_t *bytes, Py_ssize_t size, const uint8_t *lead, Py_ssize_t lead_length, Py_buffer *pieces,
          Py_ssize_t count, unsigned long long digits, double *values, Records *found)
{
    LineStart line_start = {0, 0};
    for (const uint8_t *match = find_literal(bytes, size, lead, lead_length); match != NULL;
         match = find_literal(match + 1, bytes + size - match - 1, lead, lead_length)) {
        Py_ssize_t at = match - bytes, end;
        long long numbers[3];
        if ((at > 0 && bytes[at - 1] != '\r' && bytes[at - 1] != '\n')
            || !bar_at(bytes, size, at, lead_length, pieces, count, digits, &end, numbers, values)) {
            continue;
        }
        if (push_offset(&found->starts, at) < 0 || push_offset(&found->ends, end) < 0
            || push_offset(&found->lines, line_start_at(bytes, &line_start, at)) < 0
            || push_offset(&found->leads, numbers[0]) < 0 || push_offset(&found->steps, numbers[1]) < 0
            || push_offset(&found->totals, numbers[2]) < 0) {
            return -1;
        }
        for (Py_ssize_t i = 0; i < count - 1; i++) {
            if (push_double(&found->values, values[i]) < 0) return -1;
        }
    }
    return 0;
}

/* The columns of values of ``found`` (count - 1 of them), a list of lists: of ints where ``digits`` has the column's
 * bit (digits only: a step or a total, not converted again where it is read), else of floats; NULL with an exception
 * set. */
static PyObject *
value_columns(const Records *found, Py_ssize_t count, unsigned long long digits)
{
    PyObject *columns = PyList_New(count - 1);
    if (columns == NULL) return NULL;
    Py_ssize_t records = found->steps.count;
    for (Py_ssize_t i = 0; i < count - 1; i++) {
        PyObject *column = PyList_New(records);
        if (column == NULL) goto failed;
        PyList_SET_ITEM(columns, i, column);
        int integers = i < 64 && (digits >> i & 1);
        for (Py_ssize_t record = 0; record < records; record++) {
            double number = found->values.items[record * (count - 1) + i];
            PyObject *value = integers ? PyLong_FromDouble(number) : PyFloat_FromDouble(number);
            if (value == NULL) goto failed;
            PyList_SET_ITEM(column, record, value);
        }
    }
    return columns;
failed:
    Py_DECREF(columns);
    return NULL;
}

static PyObject *
bars_result(const Records *found, Py_ssize_t count)
{
    /* Arrays, not an object a number: a block of redraws holds some 9,000 bars a MB, read where it is taken. */
    const Offsets *offsets[6] = {&found->starts, &found->ends, &found->lines, &found->leads, &found->steps,
                                 &found->totals};
    PyObject *items[8] = {offsets_list(&found->continued), PyList_New(count - 1)};
    for (int i = 0; i < 6; i++) {
        items[i + 2] = items_array("q", offsets[i]->items, offsets[i]->count * (Py_ssize_t)sizeof(int64_t));
    }
    PyObject *result = NULL;
    int ready = 1;
    for (int i = 0; i < 8; i++) ready = ready && items[i] != NULL;
    Py_ssize_t records = found->steps.count;
    double *column = ready ? PyMem_Malloc((size_t)(records ? records : 1) * sizeof(double)) : NULL;
    for (Py_ssize_t i = 0; ready && i < count - 1; i++) { /* the values are a bar's after another: a column each */
        if (column == NULL) {
            ready = 0;
            PyErr_NoMemory();
            break;
        }
        for (Py_ssize_t record = 0; record < records; record++) column[record] = found->values.items[record * (count - 1) + i];
        PyObject *values = items_array("d", column, records * (Py_ssize_t)sizeof(double));
        if (values == NULL) ready = 0;
        else PyList_SET_ITEM(items[1], i, values);
    }
    PyMem_Free(column);
    if (ready) {
        result = Py_BuildValue("(nOOOOOOOO)", found->newlines, items[0], items[2], items[3], items[4], items[5],
                               items[6], items[7], items[1]);
    }
    for (int i = 0; i < 8; i++) Py_XDECREF(items[i]);
    return result;
}

static PyObject *
records_result(const Records *found, Py_ssize_t count, unsigned long long digits)
{
    PyObject *continued = offsets_list(&found->continued), *starts = offsets_list(&found->starts);
    PyObject *lines = offsets_list(&found->lines), *steps = offsets_list(&found->steps);
    PyObject *totals = offsets_list(&found->totals), *columns = value_columns(found, count, digits), *result = NULL;
    if (continued == NULL || starts == NULL || lines == NULL || steps == NULL || totals == NULL || columns == NULL) goto done;
    result = Py_BuildValue("(nOOOOOO)", found->newlines, continued, starts, lines, steps, totals, columns);
done:
    Py_XDECREF(continued);
    Py_XDECREF(starts);
    Py_XDECREF(lines);
    Py_XDECREF(steps);
    Py_XDECREF(totals);
    Py_XDECREF(columns);
    return result;
}

static void
records_free(Records *found)
{
    free(found->continued.items);
    free(found->starts.items);
    free(found->lines.items);
    free(found->steps.items);
    free(found->totals.items);
    free(found->ends.items);
    free(found->leads.items);
    free(found->values.items);
}

/* The buffers of a tuple of pieces (two at least, the first and ``close`` not empty) into ``pieces`` (count + 1 of
 * them); how many were taken, -1 with an exception set when they are not right (those taken are then released). */
static Py_ssize_t
take_pieces(PyObject *tuple, const Py_buffer *close, Py_buffer *pieces)
{
    Py_ssize_t count = PyTuple_GET_SIZE(tuple), ready = 0;
    for (; ready < count; ready++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(tuple, ready), &pieces[ready], PyBUF_SIMPLE) < 0) break;
    }
    if (ready == count && (count < 2 || pieces[0].len == 0 || close->len == 0)) {
        PyErr_SetString(PyExc_ValueError, "two pieces at least, the first not empty; the close (the lead) not empty");
    }
    if (PyErr_Occurred()) {
        for (Py_ssize_t i = 0; i < ready; i++) PyBuffer_Release(&pieces[i]);
        return -1;
    }
    return count;
}

/* segment_records' findings in data (``bytes`` its close) or, with ``bars``, bar_records' (``bytes`` the lead);
 * the buffers are released. */
static PyObject *
records_of(Py_buffer *data, Py_buffer *bytes, PyObject *pieces_object, unsigned long long digits, int bars)
{
    Py_ssize_t count = PyTuple_GET_SIZE(pieces_object);
    PyObject *result = NULL;
    Records found = {0};
    Py_buffer *pieces = PyMem_Calloc((size_t)count + 1, sizeof(Py_buffer));
    double *values = PyMem_Calloc((size_t)count + 1, sizeof(double));
    if (pieces == NULL || values == NULL) {
        PyErr_NoMemory();
    } else if (take_pieces(pieces_object, bytes, pieces) == count) {
        int failed = bars ? walk_lines(data->buf, data->len, &found, NULL) < 0
                                || find_bars(data->buf, data->len, bytes->buf, bytes->len, pieces, count, digits, values,
                                             &found) < 0
                          : find_records(data->buf, data->len, pieces, count, bytes->buf, bytes->len, digits, values,
                                         &found, NULL) < 0;
        if (failed) {
            PyErr_NoMemory();
        } else {
            result = bars ? bars_result(&found, count) : records_result(&found, count, digits);
        }
        for (Py_ssize_t i = 0; i < count; i++) PyBuffer_Release(&pieces[i]);
    }
    records_free(&found);
    PyMem_Free(pieces);
    PyMem_Free(values);
    PyBuffer_Release(data);
    PyBuffer_Release(bytes);
    return result;
}

static PyObject *
segment_records(PyObject *module, PyObject *args)
{
    Py_buffer data, close;
    PyObject *pieces_object;
    unsigned long long digits = 0;
    if (!PyArg_ParseTuple(args, "y*O!y*|K:segment_records", &data, &PyTuple_Type, &pieces_object, &close, &digits)) {
        return NULL;
    }
    return records_of(&data, &close, pieces_object, digits, 0);
}

PyDoc_STRVAR(bar_records_doc,
"bar_records(data, lead, pieces, digits=0) -> (newlines, continued, starts, ends, lines, leads, steps, totals, columns)\n\n"
"tqdm bars drawn with their values, a carriage-return segment each. See exporter/native/scan.py.");

static PyObject *
bar_records(PyObject *module, PyObject *args)
{
    Py_buffer data, lead;
    PyObject *pieces_object;
    unsigned long long digits = 0;
    if (!PyArg_ParseTuple(args, "y*y*O!|K:bar_records", &data, &lead, &PyTuple_Type, &pieces_object, &digits)) {
        return NULL;
    }
    return records_of(&data, &lead, pieces_object, digits, 1);
}

/* An array('q') (or any buffer of int64 of format "q"; ``flags``: PyBUF_WRITABLE to change it, or 0) as a view; -1
 * with TypeError otherwise. */
static int
int64_view_of(PyObject *given, Py_buffer *view, int flags, const char *what)
{
    if (PyObject_GetBuffer(given, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | flags) < 0) {
        PyErr_Format(PyExc_TypeError, "%s is an array('q')", what);
        return -1;
    }
    if (view->itemsize != (Py_ssize_t)sizeof(int64_t) || view->format == NULL || strcmp(view->format, "q") != 0) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "%s is an array('q')", what);
        return -1;
    }
    return 0;
}

static int
int64_view(PyObject *given, Py_buffer *view, const char *what)
{
    return int64_view_of(given, view, 0, what);
}

PyDoc_STRVAR(bar_steps_doc,
"bar_steps(leads, counts, totals, limit) -> list | None\n\n"
"Each bar's step (L * T + D), None where its count is 0; None where one is over limit. See exporter/native/scan.py.");

static PyObject *
bar_steps(PyObject *module, PyObject *args)
{
    PyObject *given[3];
    long long limit;
    if (!PyArg_ParseTuple(args, "OOOL:bar_steps", &given[0], &given[1], &given[2], &limit)) return NULL;
    static const char *names[3] = {"bar_steps: leads", "bar_steps: counts", "bar_steps: totals"};
    Py_buffer views[3];
    int held = 0;
    PyObject *steps = NULL;
    for (; held < 3; held++) {
        if (int64_view(given[held], &views[held], names[held]) < 0) goto done;
    }
    Py_ssize_t count = views[0].len / (Py_ssize_t)sizeof(int64_t);
    if (views[1].len != views[0].len || views[2].len != views[0].len) {
        PyErr_SetString(PyExc_ValueError, "bar_steps: leads, counts and totals of one length");
        goto done;
    }
    const int64_t *leads = views[0].buf, *counts = views[1].buf, *totals = views[2].buf;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t step;
        if (counts[i] && (__builtin_mul_overflow(leads[i], totals[i], &step)
                          || __builtin_add_overflow(step, counts[i], &step) || step > limit)) {
            steps = Py_NewRef(Py_None);
            goto done;
        }
    }
    steps = PyList_New(count);
    if (steps == NULL) goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *step = counts[i] ? PyLong_FromLongLong(leads[i] * totals[i] + counts[i]) : Py_NewRef(Py_None);
        if (step == NULL) {
            Py_CLEAR(steps);
            goto done;
        }
        PyList_SET_ITEM(steps, i, step);
    }
done:
    while (held > 0) PyBuffer_Release(&views[--held]);
    return steps;
}

PyDoc_STRVAR(bars_apart_doc,
"bars_apart(starts, ends, first, final) -> list\n\n"
"The bars first + 1 to final - 1 not starting right after the one before. See exporter/native/scan.py.");

static PyObject *
bars_apart(PyObject *module, PyObject *args)
{
    PyObject *starts_object, *ends_object;
    Py_ssize_t first, final;
    if (!PyArg_ParseTuple(args, "OOnn:bars_apart", &starts_object, &ends_object, &first, &final)) return NULL;
    Py_buffer starts_view, ends_view;
    if (int64_view(starts_object, &starts_view, "bars_apart: starts") < 0) return NULL;
    if (int64_view(ends_object, &ends_view, "bars_apart: ends") < 0) {
        PyBuffer_Release(&starts_view);
        return NULL;
    }
    PyObject *apart = NULL;
    Py_ssize_t starts_count = starts_view.len / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t ends_count = ends_view.len / (Py_ssize_t)sizeof(int64_t);
    if (first < 0 || final < first || final > starts_count || final > ends_count) {
        PyErr_SetString(PyExc_IndexError, "bars_apart: first and final are bars of starts and ends");
        goto done;
    }
    const int64_t *starts = starts_view.buf, *ends = ends_view.buf;
    apart = PyList_New(0);
    for (Py_ssize_t index = first + 1; apart != NULL && index < final; index++) {
        if (starts[index] == ends[index - 1] + 1) continue;
        PyObject *number = PyLong_FromSsize_t(index);
        if (number == NULL || PyList_Append(apart, number) < 0) Py_CLEAR(apart);
        Py_XDECREF(number);
    }
done:
    PyBuffer_Release(&starts_view);
    PyBuffer_Release(&ends_view);
    return apart;
}

/* Ints given as an array('q') or a list of ints: sorted_difference's removed, shape_in_lines' starts. */
typedef struct {
    Py_buffer view;
    const int64_t *array; /* the view's items; NULL for a list */
    PyObject *list;
    Py_ssize_t count;
    const char *what; /* for the errors: "function: argument" */
} Int64s;

/* ``given`` as Int64s; -1 with TypeError when it is neither. */
static int
int64s_take(PyObject *given, Int64s *items, const char *what)
{
    *items = (Int64s){.what = what};
    if (PyList_Check(given)) {
        items->list = given;
        items->count = PyList_GET_SIZE(given);
        return 0;
    }
    if (int64_view(given, &items->view, what) < 0) return -1;
    items->array = items->view.buf;
    items->count = items->view.len / (Py_ssize_t)sizeof(int64_t);
    return 0;
}

/* The item ``index``; -1 with an exception set when a list's item is no int or beyond 64 bits. */
static int
int64s_at(const Int64s *items, Py_ssize_t index, long long *value)
{
    if (items->array != NULL) {
        *value = items->array[index];
        return 0;
    }
    PyObject *item = PyList_GET_ITEM(items->list, index);
    if (!PyLong_Check(item)) {
        PyErr_Format(PyExc_TypeError, "%s holds ints", items->what);
        return -1;
    }
    *value = PyLong_AsLongLong(item);
    return *value == -1 && PyErr_Occurred() ? -1 : 0;
}

static void
int64s_release(Int64s *items)
{
    if (items->array != NULL) PyBuffer_Release(&items->view);
}

PyDoc_STRVAR(sorted_difference_doc,
"sorted_difference(values, removed) -> list\n\n"
"The items of values not in removed (ascending: an array('q') or a list of ints), in order. See\n"
"exporter/native/scan.py.");

static PyObject *
sorted_difference(PyObject *module, PyObject *args)
{
    PyObject *values, *removed_object;
    if (!PyArg_ParseTuple(args, "O!O:sorted_difference", &PyList_Type, &values, &removed_object)) return NULL;
    Int64s removed;
    if (int64s_take(removed_object, &removed, "sorted_difference: removed") < 0) return NULL;
    Py_ssize_t at = 0, count = removed.count;
    long long before = LLONG_MIN;
    PyObject *kept = PyList_New(0);
    for (Py_ssize_t i = 0; kept != NULL && i < PyList_GET_SIZE(values); i++) {
        PyObject *item = PyList_GET_ITEM(values, i);
        int overflow = 0;
        long long value = PyLong_Check(item) ? PyLong_AsLongLongAndOverflow(item, &overflow) : 0;
        if (!PyLong_Check(item) || (value == -1 && PyErr_Occurred())) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "sorted_difference: values are ints");
            Py_CLEAR(kept);
            break;
        }
        if (!overflow) {
            if (value < before) at = 0; /* values going back: looked for from the start again */
            before = value;
            Py_ssize_t low = at, high = count;
            while (low < high) { /* the first removed >= value */
                Py_ssize_t middle = low + (high - low) / 2;
                long long probe;
                if (int64s_at(&removed, middle, &probe) < 0) {
                    Py_CLEAR(kept);
                    break;
                }
                if (probe < value) low = middle + 1; else high = middle;
            }
            if (kept == NULL) break;
            at = low;
            long long found;
            if (at < count) {
                if (int64s_at(&removed, at, &found) < 0) {
                    Py_CLEAR(kept);
                    break;
                }
                if (found == value) continue;
            }
        }
        if (PyList_Append(kept, item) < 0) Py_CLEAR(kept);
    }
    int64s_release(&removed);
    return kept;
}

/* An int or None (*present 0) as bar_taking's step. */
static int
optional_step(PyObject *given, long long *step, int *present, const char *what)
{
    *present = given != Py_None;
    if (!*present) return 0;
    if (!PyLong_Check(given)) {
        PyErr_Format(PyExc_TypeError, "bar_taking: %s is an int or None", what);
        return -1;
    }
    *step = PyLong_AsLongLong(given);
    return *step == -1 && PyErr_Occurred() ? -1 : 0;
}

/* bar_taking's state: the held bar's step (present or not), its index (-1: the one held before), the step taken
 * last, and what was taken. */
typedef struct {
    long long held, taken;
    int has_held, has_taken;
    Py_ssize_t held_index;
    PyObject *taken_bars, *taken_at, *before_taken_at;
} Taking;

static int
take_held(Taking *taking, long long at)
{
    PyObject *line = PyLong_FromLongLong(at);
    if (line == NULL) return -1;
    if (taking->held_index < 0) {
        Py_XSETREF(taking->before_taken_at, line);
    } else {
        PyObject *bar = PyLong_FromSsize_t(taking->held_index);
        int failed = bar == NULL || PyList_Append(taking->taken_bars, bar) < 0
                     || PyList_Append(taking->taken_at, line) < 0;
        Py_XDECREF(bar);
        Py_DECREF(line);
        if (failed) return -1;
    }
    taking->taken = taking->held;
    taking->has_taken = 1;
    taking->has_held = 0;
    return 0;
}

PyDoc_STRVAR(bar_taking_doc,
"bar_taking(steps, lines, first, last, triggers, held, taken) -> (taken_bars, taken_at, before_taken_at, held)\n\n"
"Which bars a segment reader takes, and at which line. See exporter/native/scan.py.");

static PyObject *
bar_taking(PyObject *module, PyObject *args)
{
    PyObject *steps, *lines_object, *triggers, *held_object, *taken_object;
    Py_ssize_t first, last;
    if (!PyArg_ParseTuple(args, "O!OnnO!OO:bar_taking", &PyList_Type, &steps, &lines_object, &first, &last,
                          &PyList_Type, &triggers, &held_object, &taken_object)) {
        return NULL;
    }
    Taking taking = {.held_index = -1};
    if (optional_step(held_object, &taking.held, &taking.has_held, "held") < 0
        || optional_step(taken_object, &taking.taken, &taking.has_taken, "taken") < 0) {
        return NULL;
    }
    Py_buffer view;
    if (int64_view(lines_object, &view, "bar_taking: lines") < 0) return NULL;
    const int64_t *lines = view.buf;
    Py_ssize_t bars = view.len / (Py_ssize_t)sizeof(int64_t);
    PyObject *result = NULL;
    taking.taken_bars = PyList_New(0);
    taking.taken_at = PyList_New(0);
    if (taking.taken_bars == NULL || taking.taken_at == NULL) goto done;
    if (first < 0 || last < first || last > bars || last > PyList_GET_SIZE(steps)) {
        PyErr_SetString(PyExc_IndexError, "bar_taking: first and last are bars of steps and lines");
        goto done;
    }
    Py_ssize_t index = first, triggered = PyList_GET_SIZE(triggers);
    for (Py_ssize_t t = 0; t <= triggered; t++) {
        Py_ssize_t bar = last;
        long long line = -1;
        if (t < triggered) {
            PyObject *trigger = PyList_GET_ITEM(triggers, t);
            if (!PyTuple_Check(trigger) || !PyArg_ParseTuple(trigger, "nL", &bar, &line)) {
                if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
                    PyErr_Clear();
                    PyErr_SetString(PyExc_TypeError, "bar_taking: a trigger is a tuple (bar, line) of ints");
                }
                goto done;
            }
            if (line < 0) {
                PyErr_SetString(PyExc_ValueError, "bar_taking: a trigger's line is an offset, not negative");
                goto done;
            }
            if (bar > last) bar = last;
        }
        for (Py_ssize_t at = index; at < bar; at++) {
            PyObject *item = PyList_GET_ITEM(steps, at);
            if (item == Py_None) continue;
            long long step = PyLong_AsLongLong(item);
            if (step == -1 && PyErr_Occurred()) goto done;
            if (taking.has_taken && step == taking.taken) continue;
            if (taking.has_held && taking.held != step && take_held(&taking, lines[at]) < 0) goto done;
            taking.held = step;
            taking.has_held = 1;
            taking.held_index = at;
        }
        if (bar > index) index = bar;
        if (line >= 0 && taking.has_held && take_held(&taking, line) < 0) goto done;
    }
    result = Py_BuildValue("(OOON)", taking.taken_bars, taking.taken_at,
                           taking.before_taken_at ? taking.before_taken_at : Py_None,
                           taking.has_held ? PyLong_FromSsize_t(taking.held_index) : Py_NewRef(Py_None));
done:
    PyBuffer_Release(&view);
    Py_XDECREF(taking.taken_bars);
    Py_XDECREF(taking.taken_at);
    Py_XDECREF(taking.before_taken_at);
    return result;
}

/* ------------------------------------------------------------------------------------------ */
/* Rank prefixes at the lines' starts: scan.py's line_prefixes defines them.                  */

static int
is_role_byte(uint8_t byte)
{
    return (byte >= 'A' && byte <= 'Z') || (byte >= 'a' && byte <= 'z') || byte == '_';
}

/* The length of one ``[`` role ``digits]:`` tag and one optional space at ``at`` (0: none), its role's letters
 * in *role. */
static Py_ssize_t
prefix_tag_at(const uint8_t *at, const uint8_t *end, Py_ssize_t *role)
{
    if (at >= end || *at != '[') return 0;
    const uint8_t *letters = at + 1, *digits = letters;
    while (digits < end && is_role_byte(*digits)) digits++;
    const uint8_t *close = digits;
    while (close < end && is_digit_byte(*close)) close++;
    if (digits == letters || close == digits || end - close < 2 || close[0] != ']' || close[1] != ':') return 0;
    *role = digits - letters;
    close += 2;
    if (close < end && *close == ' ') close++;
    return close - at;
}

/* ``\r(?:[ \t\x0b\x0c]*\r)*(?:\[| *\d{1,6}: )`` at the line start ``at``. */
static int
rank_after_return(const uint8_t *at, const uint8_t *end)
{
    if (at >= end || *at != '\r') return 0;
    for (at++;;) {
        const uint8_t *blank = at;
        while (blank < end && is_blank_byte(*blank)) blank++;
        if (blank == end || *blank != '\r') break;
        at = blank + 1;
    }
    if (at < end && *at == '[') return 1;
    while (at < end && *at == ' ') at++;
    const uint8_t *digits = at;
    while (at < end && is_digit_byte(*at) && at - digits <= 6) at++;
    return at > digits && at - digits <= 6 && end - at >= 2 && at[0] == ':' && at[1] == ' ';
}

/* A set of byte strings (each a span of memory held elsewhere), in the order first added, with a count each. */
typedef struct {
    const uint8_t *text;
    Py_ssize_t length, count;
} Span;

typedef struct {
    Span *items;
    Py_ssize_t count, capacity;
    Py_ssize_t *slots; /* open addressing, linear probing: an item's index + 1, 0 when empty; half full at most */
    size_t mask;
} Spans;

static size_t
span_hash(const uint8_t *text, Py_ssize_t length)
{
    uint64_t hash = 1469598103934665603u; /* FNV-1a */
    for (Py_ssize_t i = 0; i < length; i++) hash = (hash ^ text[i]) * 1099511628211u;
    return (size_t)(hash ^ hash >> 32);
}

static int
spans_rehash(Spans *set)
{
    size_t slots = set->slots ? 2 * (set->mask + 1) : 64;
    Py_ssize_t *table = calloc(slots, sizeof(Py_ssize_t));
    if (table == NULL) return -1;
    for (Py_ssize_t i = 0; i < set->count; i++) {
        size_t slot = span_hash(set->items[i].text, set->items[i].length) & (slots - 1);
        while (table[slot]) slot = (slot + 1) & (slots - 1);
        table[slot] = i + 1;
    }
    free(set->slots);
    set->slots = table;
    set->mask = slots - 1;
    return 0;
}

/* The index of the span equal to text[0:length], added (count 0) when there is none; -1 when memory ran out. */
static Py_ssize_t
span_index(Spans *set, const uint8_t *text, Py_ssize_t length)
{
    if ((size_t)(2 * (set->count + 1)) > (set->slots ? set->mask + 1 : 0) && spans_rehash(set) < 0) return -1;
    size_t slot = span_hash(text, length) & set->mask;
    for (; set->slots[slot]; slot = (slot + 1) & set->mask) {
        const Span *span = &set->items[set->slots[slot] - 1];
        if (span->length == length && memcmp(span->text, text, (size_t)length) == 0) return set->slots[slot] - 1;
    }
    if (set->count == set->capacity && grow_items((void **)&set->items, &set->capacity, sizeof(Span)) < 0) return -1;
    set->items[set->count] = (Span){text, length, 0};
    set->slots[slot] = ++set->count;
    return set->count - 1;
}

static void
spans_free(Spans *set)
{
    free(set->items);
    free(set->slots);
}

struct Prefixes {
    Spans found;   /* prefix -> the lines beginning with it */
    Spans checked; /* the literals that may occur only in the prefixes */
    int elsewhere, after_return;
};

/* The literals (a tuple of bytes, not empty, without a newline) into ``prefixes``; -1 with an exception set. */
static int
take_literals(PyObject *literals, Prefixes *prefixes)
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(literals); i++) {
        PyObject *literal = PyTuple_GET_ITEM(literals, i);
        if (!PyBytes_Check(literal) || PyBytes_GET_SIZE(literal) == 0
            || memchr(PyBytes_AS_STRING(literal), '\n', (size_t)PyBytes_GET_SIZE(literal)) != NULL) {
            PyErr_SetString(PyExc_ValueError, "the literals are bytes, not empty, without a newline");
            return -1;
        }
        if (span_index(&prefixes->checked, (const uint8_t *)PyBytes_AS_STRING(literal), PyBytes_GET_SIZE(literal)) < 0) {
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

#define MAX_SECOND_BYTES 8

/* Where literals sharing their first byte may start: that byte, followed by one of ``count`` second bytes (0: by
 * any byte, or none). */
typedef struct {
    uint8_t first, seconds[MAX_SECOND_BYTES];
    int count;
} LiteralStarts;

static const uint8_t *
next_start_bytewise(const LiteralStarts *starts, const uint8_t *at, const uint8_t *end)
{
    for (; at < end && (at = memchr(at, starts->first, (size_t)(end - at))) != NULL; at++) {
        if (starts->count == 0) return at;
        for (int i = 0; at + 1 < end && i < starts->count; i++) {
            if (at[1] == starts->seconds[i]) return at;
        }
    }
    return NULL;
}

#ifdef HAVE_AVX2_SCAN
/* 32 positions at a time, both bytes compared: a progress bar's ``[00:01<00:14, ...]`` on every segment stops a
 * search for the first byte alone every few dozen bytes. */
__attribute__((target("avx2"))) static const uint8_t *
next_start_avx2(const LiteralStarts *starts, const uint8_t *at, const uint8_t *end)
{
    const __m256i first = _mm256_set1_epi8((char)starts->first);
    for (; end - at > 32; at += 32) {
        unsigned found = (unsigned)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_loadu_si256((const __m256i *)at), first));
        if (found == 0) continue;
        const __m256i next = _mm256_loadu_si256((const __m256i *)(at + 1));
        __m256i seconds = _mm256_setzero_si256();
        for (int i = 0; i < starts->count; i++) {
            seconds = _mm256_or_si256(seconds, _mm256_cmpeq_epi8(next, _mm256_set1_epi8((char)starts->seconds[i])));
        }
        found &= (unsigned)_mm256_movemask_epi8(seconds);
        if (found) return at + __builtin_ctz(found);
    }
    return next_start_bytewise(starts, at, end);
}
#endif

/* The first place at or after ``at`` where one of the literals may start. */
static const uint8_t *
next_start(const LiteralStarts *starts, const uint8_t *at, const uint8_t *end)
{
#ifdef HAVE_AVX2_SCAN
    if (have_avx2 && starts->count > 0) return next_start_avx2(starts, at, end);
#endif
    return next_start_bytewise(starts, at, end);
}

/* Each literal's non-overlapping occurrences in bytes[0:size] (as bytes.count) into its span's count. Where all
 * begin with one byte (the rank prefixes' ``[``), one pass stops where that byte and one of their second bytes
 * are, for all of them. -1 when memory ran out. */
static int
count_literals(const uint8_t *bytes, Py_ssize_t size, Spans *literals)
{
    Py_ssize_t count = literals->count;
    LiteralStarts starts = {.first = count ? literals->items[0].text[0] : 0};
    int shared = 1, seconds = 1;
    for (Py_ssize_t i = 0; i < count && shared; i++) {
        const Span *literal = &literals->items[i];
        shared = literal->text[0] == starts.first;
        seconds = seconds && literal->length > 1;
        if (!seconds || memchr(starts.seconds, literal->text[1], (size_t)starts.count) != NULL) continue;
        if (starts.count == MAX_SECOND_BYTES) {
            seconds = 0;
        } else {
            starts.seconds[starts.count++] = literal->text[1];
        }
    }
    if (!seconds) starts.count = 0;
    if (!shared || count < 2) {
        for (Py_ssize_t i = 0; i < count; i++) {
            Span *literal = &literals->items[i];
            literal->count = occurrences((const char *)bytes, size, (const char *)literal->text, literal->length);
        }
        return 0;
    }
    const uint8_t **free_from = malloc((size_t)count * sizeof *free_from); /* where each may match next */
    if (free_from == NULL) return -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        literals->items[i].count = 0;
        free_from[i] = bytes;
    }
    const uint8_t *end = bytes + size;
    for (const uint8_t *match = next_start(&starts, bytes, end); match != NULL; match = next_start(&starts, match + 1, end)) {
        for (Py_ssize_t i = 0; i < count; i++) {
            Span *literal = &literals->items[i];
            if (match >= free_from[i] && end - match >= literal->length
                && memcmp(match + 1, literal->text + 1, (size_t)literal->length - 1) == 0) {
                literal->count++;
                free_from[i] = match + literal->length;
            }
        }
    }
    free(free_from);
    return 0;
}

/* The prefixes the line at ``line`` begins with counted, and whether it names a rank after a carriage return; -1
 * when memory ran out. */
static int
prefixed_line(const uint8_t *line, const uint8_t *end, Prefixes *prefixes)
{
    Py_ssize_t width = 0, tag, role;
    while ((tag = prefix_tag_at(line + width, end, &role)) > 0) width += tag;
    if (width) {
        Py_ssize_t index = span_index(&prefixes->found, line, width);
        if (index < 0) return -1;
        prefixes->found.items[index].count++;
    }
    prefixes->after_return = prefixes->after_return || rank_after_return(line, end);
    return 0;
}

/* The prefixes of data[0:size]'s lines (``walked``: prefixed_line has seen each line), whether a checked literal
 * (those taken, and every prefix's ``[role``) occurs elsewhere, and whether a line names a rank after a carriage
 * return, without the interpreter; -1 when memory ran out. */
static int
find_prefixes(const uint8_t *bytes, Py_ssize_t size, Prefixes *prefixes, int walked)
{
    const uint8_t *end = bytes + size;
    for (const uint8_t *line = bytes; !walked;) {
        if (prefixed_line(line, end, prefixes) < 0) return -1;
        const uint8_t *newline = memchr(line, '\n', (size_t)(end - line));
        if (newline == NULL) break;
        line = newline + 1;
    }
    for (Py_ssize_t i = 0; i < prefixes->found.count; i++) {
        const uint8_t *at = prefixes->found.items[i].text, *stop = at + prefixes->found.items[i].length;
        Py_ssize_t tag, role;
        for (; (tag = prefix_tag_at(at, stop, &role)) > 0; at += tag) {
            if (span_index(&prefixes->checked, at, role + 1) < 0) return -1;
        }
    }
    if (count_literals(bytes, size, &prefixes->checked) < 0) return -1;
    for (Py_ssize_t i = 0; i < prefixes->checked.count && !prefixes->elsewhere; i++) {
        const Span *literal = &prefixes->checked.items[i];
        Py_ssize_t expected = 0;
        for (Py_ssize_t j = 0; j < prefixes->found.count; j++) {
            const Span *prefix = &prefixes->found.items[j];
            expected += occurrences((const char *)prefix->text, prefix->length, (const char *)literal->text,
                                    literal->length) * prefix->count;
        }
        prefixes->elsewhere = literal->count != expected;
    }
    return 0;
}

static PyObject *
prefixes_result(const Prefixes *prefixes)
{
    PyObject *found = NULL;
    if (prefixes->elsewhere) {
        found = Py_NewRef(Py_None);
    } else if ((found = PyDict_New()) != NULL) {
        for (Py_ssize_t i = 0; i < prefixes->found.count; i++) {
            const Span *prefix = &prefixes->found.items[i];
            PyObject *key = PyBytes_FromStringAndSize((const char *)prefix->text, prefix->length);
            PyObject *lines = PyLong_FromSsize_t(prefix->count);
            int failed = key == NULL || lines == NULL || PyDict_SetItem(found, key, lines) < 0;
            Py_XDECREF(key);
            Py_XDECREF(lines);
            if (failed) {
                Py_CLEAR(found);
                break;
            }
        }
    }
    return found == NULL ? NULL : Py_BuildValue("(NO)", found, prefixes->after_return ? Py_True : Py_False);
}

static void
prefixes_free(Prefixes *prefixes)
{
    spans_free(&prefixes->found);
    spans_free(&prefixes->checked);
}

PyDoc_STRVAR(line_prefixes_doc,
"line_prefixes(data, literals) -> (prefixes | None, rank_after_return)\n\n"
"The rank prefixes the lines of ``data`` begin with, and how many lines begin with each (None when a literal\n"
"occurs elsewhere); whether a line names a rank after a carriage return. See exporter/native/scan.py.");

static PyObject *
line_prefixes(PyObject *module, PyObject *args)
{
    Py_buffer data;
    PyObject *literals, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*O!:line_prefixes", &data, &PyTuple_Type, &literals)) return NULL;
    Prefixes prefixes = {0};
    if (take_literals(literals, &prefixes) == 0) {
        result = find_prefixes(data.buf, data.len, &prefixes, 0) < 0 ? PyErr_NoMemory() : prefixes_result(&prefixes);
    }
    prefixes_free(&prefixes);
    PyBuffer_Release(&data);
    return result;
}


/* ------------------------------------------------------------------------------------------ */
/* Passes ahead: a block's passes computed on a thread of their own, which never takes the      */
/* interpreter, while the caller goes on with the block before it (the second core of a         */
/* catch-up); their results are built when asked for, as the functions above return them.      */

typedef enum {
    PASS_SCAN, PASS_SCAN_SEGMENTS, PASS_GROUP_LINES, PASS_SEGMENT_RECORDS, PASS_LINE_PREFIXES, PASS_BAR_RECORDS
} PassKind;

typedef struct {
    PassKind kind;
    PyObject *argument; /* the scanner, the pieces or the literals (a reference) */
    Py_buffer buffers[4]; /* the pass's bytes: group_lines' four, segment_records' close, bar_records' lead */
    Py_ssize_t held; /* how many of buffers are held */
    Py_buffer *pieces; /* segment_records' and bar_records' pieces (count of them held) and their values scratch */
    Py_ssize_t count;
    double *values;
    unsigned long long digits; /* segment_records' values of digits only */
    int failed; /* memory ran out */
    int walked; /* line prefixes: their lines walked by a segment records' pass */
    union {
        ScanState scan;
        Groups *groups;
        Records records;
        Prefixes prefixes;
    } found;
} Pass;

typedef struct {
    PyObject_HEAD
    Py_buffer data;
    int has_data;
    Pass *passes;
    Py_ssize_t count;
    Worker worker; /* the passes, computed one after the other */
} Ahead;

/* ``walking``: the line prefixes a segment records' pass notes on its walk over the lines (NULL: none). */
static void
compute_pass(const Py_buffer *data, Pass *pass, Prefixes *walking)
{
    switch (pass->kind) {
    case PASS_SCAN:
    case PASS_SCAN_SEGMENTS:
        pass->found.scan.data = data->buf;
        pass->found.scan.length = data->len;
        pass->found.scan.segments = pass->kind == PASS_SCAN_SEGMENTS;
        pass->failed = scan_block((const Scanner *)pass->argument, &pass->found.scan) < 0;
        break;
    case PASS_GROUP_LINES:
        pass->failed = find_groups(data->buf, data->len, &pass->buffers[0], &pass->buffers[1], &pass->buffers[2],
                                   &pass->buffers[3], pass->found.groups) < 0;
        break;
    case PASS_SEGMENT_RECORDS:
        pass->failed = find_records(data->buf, data->len, pass->pieces, pass->count, pass->buffers[0].buf,
                                    pass->buffers[0].len, pass->digits, pass->values, &pass->found.records, walking) < 0;
        break;
    case PASS_LINE_PREFIXES:
        pass->failed = find_prefixes(data->buf, data->len, &pass->found.prefixes, pass->walked) < 0;
        break;
    case PASS_BAR_RECORDS:
        pass->failed = walk_lines(data->buf, data->len, &pass->found.records, walking) < 0
                       || find_bars(data->buf, data->len, pass->buffers[0].buf, pass->buffers[0].len, pass->pieces,
                                    pass->count, pass->digits, pass->values, &pass->found.records) < 0;
        break;
    }
}

static void *
compute_passes(void *argument)
{
    Ahead *self = argument;
    /* A carriage-return console's block takes both: one walk over its lines for the two. */
    Pass *records = NULL, *prefixes = NULL;
    for (Py_ssize_t i = 0; i < self->count; i++) {
        Pass *pass = &self->passes[i];
        if ((pass->kind == PASS_SEGMENT_RECORDS || pass->kind == PASS_BAR_RECORDS) && records == NULL) records = pass;
        if (pass->kind == PASS_LINE_PREFIXES && prefixes == NULL) prefixes = pass;
    }
    if (records != NULL && prefixes != NULL) {
        compute_pass(&self->data, records, &prefixes->found.prefixes);
        prefixes->walked = 1;
        prefixes->failed = records->failed;
    } else {
        records = NULL;
    }
    for (Py_ssize_t i = 0; i < self->count; i++) {
        Pass *pass = &self->passes[i];
        if (pass != records && !pass->failed) compute_pass(&self->data, pass, NULL);
    }
    return NULL;
}

static void
release_pass(Pass *pass)
{
    switch (pass->kind) {
    case PASS_SCAN:
    case PASS_SCAN_SEGMENTS:
        scan_state_free(&pass->found.scan);
        if (pass->argument) ((Scanner *)pass->argument)->jobs--;
        break;
    case PASS_GROUP_LINES:
        if (pass->found.groups) groups_free(pass->found.groups);
        free(pass->found.groups);
        break;
    case PASS_SEGMENT_RECORDS:
    case PASS_BAR_RECORDS:
        records_free(&pass->found.records);
        for (Py_ssize_t i = 0; i < pass->count; i++) PyBuffer_Release(&pass->pieces[i]);
        PyMem_Free(pass->pieces);
        PyMem_Free(pass->values);
        break;
    case PASS_LINE_PREFIXES:
        prefixes_free(&pass->found.prefixes);
        break;
    }
    for (Py_ssize_t i = 0; i < pass->held; i++) PyBuffer_Release(&pass->buffers[i]);
    Py_CLEAR(pass->argument);
}

/* One pass from its tuple, e.g. ("scan", scanner), checked as its function checks its arguments; -1 with an
 * exception set. */
static int
take_pass(PyObject *item, Pass *pass)
{
    static const char *names[] = {"scan", "scan_segments", "group_lines", "segment_records", "line_prefixes",
                                  "bar_records"};
    static const Py_ssize_t arguments[] = {1, 1, 4, 3, 1, 3};
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 1 || !PyUnicode_Check(PyTuple_GET_ITEM(item, 0))) {
        PyErr_SetString(PyExc_TypeError, "a pass is a tuple: its function's name, then its arguments but the data");
        return -1;
    }
    int kind = 0;
    while (kind < 6 && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(item, 0), names[kind]) != 0) kind++;
    if (kind == 6 || PyTuple_GET_SIZE(item) != arguments[kind] + 1) {
        PyErr_Format(PyExc_ValueError, "no pass %R", item);
        return -1;
    }
    pass->kind = kind;
    PyObject *first = PyTuple_GET_ITEM(item, 1);
    switch (pass->kind) {
    case PASS_SCAN:
    case PASS_SCAN_SEGMENTS:
        if (!PyObject_TypeCheck(first, &ScannerType)) {
            PyErr_SetString(PyExc_TypeError, "a scan pass takes a Scanner");
            return -1;
        }
        if (pass->kind == PASS_SCAN_SEGMENTS && ((Scanner *)first)->breaks) {
            PyErr_SetString(PyExc_ValueError, "scan_segments: an anchor or line start holds a line break");
            return -1;
        }
        pass->argument = Py_NewRef(first);
        ((Scanner *)first)->jobs++;
        return 0;
    case PASS_GROUP_LINES:
        for (; pass->held < 4; pass->held++) {
            if (PyObject_GetBuffer(PyTuple_GET_ITEM(item, pass->held + 1), &pass->buffers[pass->held], PyBUF_SIMPLE) < 0) {
                return -1;
            }
        }
        if (check_group_arguments(&pass->buffers[1], &pass->buffers[2]) < 0) return -1;
        if ((pass->found.groups = calloc(1, sizeof(Groups))) == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        return 0;
    case PASS_SEGMENT_RECORDS:
    case PASS_BAR_RECORDS: {
        /* ("segment_records", pieces, close, digits) or ("bar_records", lead, pieces, digits) */
        int bars = pass->kind == PASS_BAR_RECORDS;
        PyObject *tuple = PyTuple_GET_ITEM(item, 1 + bars), *bytes = PyTuple_GET_ITEM(item, 2 - bars);
        if (!PyTuple_Check(tuple)) {
            PyErr_SetString(PyExc_TypeError, bars ? "bar_records' pieces are a tuple" : "segment_records' pieces are a tuple");
            return -1;
        }
        pass->digits = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(item, 3));
        if (PyErr_Occurred()) return -1;
        if (PyObject_GetBuffer(bytes, &pass->buffers[0], PyBUF_SIMPLE) < 0) return -1;
        pass->held = 1;
        pass->pieces = PyMem_Calloc((size_t)PyTuple_GET_SIZE(tuple) + 1, sizeof(Py_buffer));
        pass->values = PyMem_Calloc((size_t)PyTuple_GET_SIZE(tuple) + 1, sizeof(double));
        if (pass->pieces == NULL || pass->values == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        if (take_pieces(tuple, &pass->buffers[0], pass->pieces) < 0) return -1;
        pass->count = PyTuple_GET_SIZE(tuple);
        return 0;
    }
    case PASS_LINE_PREFIXES:
        if (!PyTuple_Check(first)) {
            PyErr_SetString(PyExc_TypeError, "line_prefixes' literals are a tuple");
            return -1;
        }
        pass->argument = Py_NewRef(first); /* the checked spans point into its bytes */
        return take_literals(first, &pass->found.prefixes);
    }
    return 0;
}

static void
Ahead_clear(Ahead *self)
{
    worker_join(&self->worker);
    self->worker = (Worker){0};
    for (Py_ssize_t i = 0; i < self->count; i++) release_pass(&self->passes[i]);
    PyMem_Free(self->passes);
    self->passes = NULL;
    self->count = 0;
    if (self->has_data) PyBuffer_Release(&self->data);
    self->has_data = 0;
}

static int
Ahead_init(Ahead *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"data", "passes", NULL};
    PyObject *data, *passes;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!", keywords, &data, &PyTuple_Type, &passes)) return -1;
    Ahead_clear(self);
    if (PyObject_GetBuffer(data, &self->data, PyBUF_SIMPLE) < 0) return -1;
    self->has_data = 1;
    self->passes = PyMem_Calloc((size_t)PyTuple_GET_SIZE(passes) + 1, sizeof(Pass));
    if (self->passes == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (; self->count < PyTuple_GET_SIZE(passes); self->count++) {
        if (take_pass(PyTuple_GET_ITEM(passes, self->count), &self->passes[self->count]) < 0) {
            self->count++; /* released with the others */
            Ahead_clear(self);
            return -1;
        }
    }
    worker_start(&self->worker, compute_passes, self);
    return 0;
}

PyDoc_STRVAR(Ahead_result_doc,
"result(index) -> what the pass at ``index`` returns, as its function called on the data would\n\n"
"Waits for the passes (the interpreter free meanwhile).");

static PyObject *
Ahead_result(Ahead *self, PyObject *argument)
{
    Py_ssize_t index = PyLong_AsSsize_t(argument);
    if (index == -1 && PyErr_Occurred()) return NULL;
    if (index < 0 || index >= self->count) {
        PyErr_SetString(PyExc_IndexError, "no pass at that index");
        return NULL;
    }
    worker_wait(&self->worker);
    Pass *pass = &self->passes[index];
    if (pass->failed) return PyErr_NoMemory();
    switch (pass->kind) {
    case PASS_SCAN:
    case PASS_SCAN_SEGMENTS:
        return scan_result(&pass->found.scan);
    case PASS_GROUP_LINES:
        return groups_result(pass->found.groups);
    case PASS_SEGMENT_RECORDS:
        return records_result(&pass->found.records, pass->count, pass->digits);
    case PASS_BAR_RECORDS:
        return bars_result(&pass->found.records, pass->count);
    case PASS_LINE_PREFIXES:
        return prefixes_result(&pass->found.prefixes);
    }
    Py_RETURN_NONE;
}

static void
Ahead_dealloc(Ahead *self)
{
    Ahead_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Ahead_methods[] = {
    {"result", (PyCFunction)Ahead_result, METH_O, Ahead_result_doc},
    {NULL},
};

static PyTypeObject AheadType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "exporter.native._scan.Ahead",
    .tp_doc = PyDoc_STR("Ahead(data, passes): the passes over ``data`` (tuples: a function's name and its arguments "
                        "but the data) started on a thread of their own."),
    .tp_basicsize = sizeof(Ahead),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Ahead_init,
    .tp_dealloc = (destructor)Ahead_dealloc,
    .tp_methods = Ahead_methods,
};

PyDoc_STRVAR(shape_in_lines_doc,
"shape_in_lines(data, starts, shape, width) -> list[int]\n\n"
"The indexes of starts whose line's first width bytes hold shape ('#' any digit; no newline in it). See\n"
"exporter/native/scan.py.");

/* The first place at or after ``at`` where ``pattern`` (length bytes, the first no '#'; a '#' after it any ASCII
 * digit) is, whole before ``end``; ``end`` when there is none. */
static const uint8_t *
next_shape(const uint8_t *at, const uint8_t *end, const uint8_t *pattern, Py_ssize_t length)
{
    while (end - at >= length) {
        const uint8_t *first = memchr(at, pattern[0], (size_t)(end - at - length + 1));
        if (first == NULL) return end;
        Py_ssize_t i = 1;
        while (i < length && (pattern[i] == '#' ? is_digit_byte(first[i]) : first[i] == pattern[i])) i++;
        if (i == length) return first;
        at = first + 1;
    }
    return end;
}

static PyObject *
shape_in_lines(PyObject *module, PyObject *args)
{
    Py_buffer data, shape;
    PyObject *starts_object;
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "y*Oy*n:shape_in_lines", &data, &starts_object, &shape, &width)) return NULL;
    PyObject *found = NULL;
    const uint8_t *pattern = shape.buf, *bytes = data.buf;
    Int64s starts;
    if (shape.len == 0 || pattern[0] == '#' || memchr(pattern, '\n', (size_t)shape.len) != NULL || width < 0) {
        PyErr_SetString(PyExc_ValueError, "shape_in_lines: a shape beginning with a byte that is no '#', holding no "
                                          "newline; a width not negative");
        goto done;
    }
    if (int64s_take(starts_object, &starts, "shape_in_lines: starts") < 0) goto done;
    found = PyList_New(0);
    for (Py_ssize_t i = 0; found != NULL && i < starts.count; i++) {
        long long start;
        if (int64s_at(&starts, i, &start) < 0) {
            Py_CLEAR(found);
            break;
        }
        if (start < 0 || start > data.len) {
            PyErr_SetString(PyExc_IndexError, "shape_in_lines: a start outside data");
            Py_CLEAR(found);
            break;
        }
        /* Each line's first width bytes alone: a line of redraws is long, a block's lines between two starts may be
         * many. The line's newline is looked for only once a shape is found: most lines hold none. */
        const uint8_t *line = bytes + start, *end = bytes + (data.len - start < width ? data.len : start + width);
        const uint8_t *found_at = next_shape(line, end, pattern, shape.len);
        if (found_at == end || memchr(line, '\n', (size_t)(found_at - line)) != NULL) continue;
        PyObject *index = PyLong_FromSsize_t(i);
        if (index == NULL || PyList_Append(found, index) < 0) Py_CLEAR(found);
        Py_XDECREF(index);
    }
    int64s_release(&starts);
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&shape);
    return found;
}

PyDoc_STRVAR(first_bytes_doc,
"first_bytes(data, offsets) -> bytes\n\n"
"The distinct bytes of data at the offsets (a list of ints), in ascending order; IndexError for an offset\n"
"outside data.");

static PyObject *
first_bytes(PyObject *module, PyObject *args)
{
    Py_buffer data;
    PyObject *offsets;
    if (!PyArg_ParseTuple(args, "y*O!:first_bytes", &data, &PyList_Type, &offsets)) return NULL;
    const uint8_t *bytes = data.buf;
    char seen[256] = {0};
    int failed = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(offsets) && !failed; i++) {
        Py_ssize_t at = PyLong_AsSsize_t(PyList_GET_ITEM(offsets, i));
        if (at == -1 && PyErr_Occurred()) failed = 1;
        else if (at < 0 || at >= data.len) {
            PyErr_SetString(PyExc_IndexError, "first_bytes: an offset outside data");
            failed = 1;
        }
        else seen[bytes[at]] = 1;
    }
    PyBuffer_Release(&data);
    if (failed) return NULL;
    char found[256];
    Py_ssize_t count = 0;
    for (int byte = 0; byte < 256; byte++) {
        if (seen[byte]) found[count++] = (char)byte;
    }
    return PyBytes_FromStringAndSize(found, count);
}

PyDoc_STRVAR(shift_offsets_doc,
"shift_offsets(offsets, delta) -> None\n\n"
"Add delta to each offset of offsets (an array('q')), in place; OverflowError, nothing changed, when one would\n"
"leave 64 bits.");

static PyObject *
shift_offsets(PyObject *module, PyObject *args)
{
    Py_buffer view;
    PyObject *given;
    long long delta;
    if (!PyArg_ParseTuple(args, "OL:shift_offsets", &given, &delta)) return NULL;
    if (int64_view_of(given, &view, PyBUF_WRITABLE, "shift_offsets: offsets") < 0) return NULL;
    int64_t *offsets = view.buf;
    Py_ssize_t count = view.len / (Py_ssize_t)sizeof(int64_t);
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t shifted;
        if (__builtin_add_overflow(offsets[i], (int64_t)delta, &shifted)) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_OverflowError, "shift_offsets: an offset beyond 64 bits");
            return NULL;
        }
    }
    for (Py_ssize_t i = 0; i < count; i++) offsets[i] += delta;
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"shift_offsets", shift_offsets, METH_VARARGS, shift_offsets_doc},
    {"first_bytes", first_bytes, METH_VARARGS, first_bytes_doc},
    {"shape_in_lines", shape_in_lines, METH_VARARGS, shape_in_lines_doc},
    {"count_starts", count_starts, METH_VARARGS, count_starts_doc},
    {"group_lines", group_lines, METH_VARARGS, group_lines_doc},
    {"segment_records", segment_records, METH_VARARGS, segment_records_doc},
    {"bar_records", bar_records, METH_VARARGS, bar_records_doc},
    {"bar_steps", bar_steps, METH_VARARGS, bar_steps_doc},
    {"bar_taking", bar_taking, METH_VARARGS, bar_taking_doc},
    {"bars_apart", bars_apart, METH_VARARGS, bars_apart_doc},
    {"sorted_difference", sorted_difference, METH_VARARGS, sorted_difference_doc},
    {"line_prefixes", line_prefixes, METH_VARARGS, line_prefixes_doc},
    {NULL},
};

static struct PyModuleDef scan_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "exporter.native._scan",
    .m_doc = "Kernel: a block's newlines and the lines holding any anchor (twin: exporter/native/scan.py).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__scan(void)
{
#ifdef HAVE_AVX2_SCAN
    __builtin_cpu_init();
    have_avx2 = __builtin_cpu_supports("avx2");
#endif
    if (PyType_Ready(&ScannerType) < 0 || PyType_Ready(&AheadType) < 0 || import_array_type() < 0) return NULL;
    PyObject *module = PyModule_Create(&scan_module);
    if (module == NULL) return NULL;
    if (PyModule_AddObjectRef(module, "Scanner", (PyObject *)&ScannerType) < 0
        || PyModule_AddObjectRef(module, "Ahead", (PyObject *)&AheadType) < 0) {
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
