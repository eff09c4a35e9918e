/* Kernel: one pass over a block counts its newlines and finds the lines holding any anchor.
 *
 * Its pure-Python twin, exporter/native/scan.py, defines what it returns; tests/test_native.py
 * checks both on generated, fuzzed and cut blocks. It takes bytes and returns
 * (newlines, starts, prefixed): plain numbers and lists, nothing of the package.
 *
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
    int simd;                /* use the AVX2 loop where the CPU has it (tests turn it off) */
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
    static char *keywords[] = {"anchors", "line_starts", "simd", NULL};
    PyObject *anchors, *line_starts = NULL;
    int simd = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O$p", keywords, &anchors, &line_starts, &simd)) return -1;
    self->simd = simd;
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

__attribute__((target("avx2"))) static inline int
verify_lanes(const Scanner *self, ScanState *state, Py_ssize_t position, __m256i buckets, __m256i zero)
{
    unsigned candidates = ~(unsigned)_mm256_movemask_epi8(_mm256_cmpeq_epi8(buckets, zero));
    if (candidates == 0) return 0;
    uint8_t lanes[32];
    _mm256_storeu_si256((__m256i *)lanes, buckets);
    while (candidates) {
        int lane = __builtin_ctz(candidates);
        candidates &= candidates - 1;
        if (verify(self, state, position + lane, lanes[lane]) < 0) return -1;
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

/* 64 positions at a time; returns where the byte-wise scan has to take over. */
__attribute__((target("avx2"))) static Py_ssize_t
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
    __m256i counters = zero;
    int rounds = 0;
    Py_ssize_t newlines = 0, position = 0;
    for (; position + 64 + FINGERPRINT - 1 <= length; position += 64) {
        const uint8_t *at = data + position;
        __m256i a0 = _mm256_loadu_si256((const __m256i *)at), b0 = _mm256_loadu_si256((const __m256i *)(at + 32));
        __m256i a1 = _mm256_loadu_si256((const __m256i *)(at + 1)), b1 = _mm256_loadu_si256((const __m256i *)(at + 33));
        __m256i a2 = _mm256_loadu_si256((const __m256i *)(at + 2)), b2 = _mm256_loadu_si256((const __m256i *)(at + 34));
        counters = _mm256_sub_epi8(counters, _mm256_cmpeq_epi8(a0, newline));
        counters = _mm256_sub_epi8(counters, _mm256_cmpeq_epi8(b0, newline));
        if (++rounds == 127) { /* at most 2 a round per byte counter: 254 fits */
            newlines += sum_counters(counters);
            counters = zero;
            rounds = 0;
        }
        __m256i a = _mm256_and_si256(_mm256_and_si256(nibble_match(low0, high0, a0, nibble_mask),
                                                      nibble_match(low1, high1, a1, nibble_mask)),
                                     nibble_match(low2, high2, a2, nibble_mask));
        __m256i b = _mm256_and_si256(_mm256_and_si256(nibble_match(low0, high0, b0, nibble_mask),
                                                      nibble_match(low1, high1, b1, nibble_mask)),
                                     nibble_match(low2, high2, b2, nibble_mask));
        if (_mm256_testz_si256(_mm256_or_si256(a, b), _mm256_or_si256(a, b))) continue;
        if (verify_lanes(self, state, position, a, zero) < 0 || verify_lanes(self, state, position + 32, b, zero) < 0) {
            return -1;
        }
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
    if (have_avx2 && self->simd && (from = scan_avx2(self, &state)) < 0) goto done;
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

static struct PyModuleDef scan_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "exporter.native._scan",
    .m_doc = "Kernel: a block's newlines and the lines holding any anchor (twin: exporter/native/scan.py).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__scan(void)
{
#ifdef HAVE_AVX2_SCAN
    __builtin_cpu_init();
    have_avx2 = __builtin_cpu_supports("avx2");
#endif
    if (PyType_Ready(&ScannerType) < 0) return NULL;
    PyObject *module = PyModule_Create(&scan_module);
    if (module == NULL) return NULL;
    if (PyModule_AddObjectRef(module, "Scanner", (PyObject *)&ScannerType) < 0) {
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
