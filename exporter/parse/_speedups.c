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
    .tp_name = "exporter.parse._speedups.Scanner",
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
/* StepColumns: MindFormers PyNative step lines into columns                                  */
/*
 * The twin of parse/mindformers.py's parse_pynative, a line at a time, for ASCII lines (a
 * line with any other byte is declined and goes the Python way). A plain decimal is read
 * exactly (simple_decimal); other numbers by PyOS_string_to_double, the function behind
 * float(), and a token it does not take whole by float() itself: the values are float()'s.
 * Only the loss and gradient norm columns keep a value per line; of the other fields the
 * latest is kept as a C double until take().
 */

#define MAX_NUMBER_TEXT 64
#define MAX_DIGITS 18 /* an int64 for sure; a longer step number goes the Python way */

#define MAX_NAMED_PER_LINE 16 /* more named fields on one line go the Python way */
#define MAX_CACHED_NAMES 64

typedef struct {
    PyObject *name; /* str */
    double value;   /* the latest */
    Py_ssize_t rows;
} Named;

typedef struct {
    PyObject_HEAD
    PyObject *batch_type;
    PyObject *steps, *loss_steps, *losses, *grad_norm_steps, *grad_norms; /* lists */
    /* The latest value of the other fields: only the last one ends up in the batch. */
    int has_total_steps, has_learning_rate, has_step_time, has_throughput;
    long long total_steps;
    double learning_rate, step_time_seconds, throughput;
    PyObject *throughput_unit; /* str or NULL */
    Named *named;              /* in order of appearance */
    Py_ssize_t named_count, named_capacity;
    PyObject *names[MAX_CACHED_NAMES]; /* field names and units met so far, made once */
    int name_count;
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

/* float(token) as parse_float gives it: 1 and *value, 0 (not a number: None), -1 (error). */
static int
parse_number(const uint8_t *token, Py_ssize_t length, double *value)
{
    if (length == 0) return 0;
    if (simple_decimal(token, token + length, value)) return 1;
    if (length < MAX_NUMBER_TEXT) {
        char text[MAX_NUMBER_TEXT];
        memcpy(text, token, (size_t)length);
        text[length] = '\0';
        char *end = NULL;
        double number = PyOS_string_to_double(text, &end, NULL);
        if (end == text + length && !(number == -1.0 && PyErr_Occurred())) {
            *value = number;
            return 1;
        }
        PyErr_Clear();
    }
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

/* parse_duration_seconds(token, default_unit="ms"): as parse_number. */
static int
parse_duration(const uint8_t *token, Py_ssize_t length, double *seconds)
{
    static const char *units[] = {"ms", "s", "us", "sec", "seconds"};
    static const double per_second[] = {1e3, 1.0, 1e6, 1.0, 1.0};
    Py_ssize_t number = number_part(token, length, "-+0123456789.eE");
    if (number == 0) return 0;
    const uint8_t *unit = skip_spaces(token + number, token + length);
    Py_ssize_t unit_length = token + length - unit;
    double divisor = 1e3; /* no unit: milliseconds */
    if (unit_length) {
        int found = -1;
        for (int i = 0; i < 5 && found < 0; i++) {
            if ((Py_ssize_t)strlen(units[i]) == unit_length && starts_with_nocase(unit, unit_length, units[i])) found = i;
        }
        if (found < 0) return 0;
        divisor = per_second[found];
    }
    int parsed = parse_number(token, number, seconds);
    if (parsed == 1) *seconds /= divisor;
    return parsed;
}

/* The str of a field name or unit: made once per columns, then reused (a new one past the cache). */
static PyObject *
name_of(StepColumns *self, const uint8_t *text, Py_ssize_t length)
{
    for (int i = 0; i < self->name_count; i++) {
        PyObject *name = self->names[i];
        if (PyUnicode_GET_LENGTH(name) == length && memcmp(PyUnicode_1BYTE_DATA(name), text, (size_t)length) == 0) {
            return Py_NewRef(name);
        }
    }
    PyObject *name = PyUnicode_DecodeASCII((const char *)text, length, NULL);
    if (name != NULL && self->name_count < MAX_CACHED_NAMES) self->names[self->name_count++] = Py_NewRef(name);
    return name;
}

/* parse_number_with_unit(token): 1 with *value and *unit (NULL when empty), 0 (None), -1 (error). */
static int
parse_with_unit(StepColumns *self, const uint8_t *token, Py_ssize_t length, double *value, PyObject **unit)
{
    *unit = NULL;
    Py_ssize_t number = number_part(token, length, "-+0123456789.eE,");
    const uint8_t *rest = skip_spaces(token + number, token + length);
    Py_ssize_t rest_length = token + length - rest;
    if (number == 0 || span_of(rest, rest_length, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz/%") != rest_length) {
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
    int parsed = parse_number(text, kept, value);
    PyMem_Free(text);
    if (parsed == 1 && rest_length && (*unit = name_of(self, rest, rest_length)) == NULL) return -1;
    return parsed;
}

/* One line's record: set (1 or 0, as parsed), unset (-1); the line's named values in order. */
typedef struct {
    int loss, learning_rate, grad_norm, step_time, throughput;
    double loss_value, learning_rate_value, grad_norm_value, step_time_value, throughput_value;
    PyObject *unit; /* of the throughput, or NULL */
    struct {
        PyObject *name;
        double value;
        int aux;
    } named[MAX_NAMED_PER_LINE];
    int named_count;
} Fields;

static void
clear_fields(Fields *fields)
{
    Py_CLEAR(fields->unit);
    for (int i = 0; i < fields->named_count; i++) Py_CLEAR(fields->named[i].name);
    fields->named_count = 0;
}

static int
name_is(const uint8_t *name, Py_ssize_t length, const char *literal)
{
    return (Py_ssize_t)strlen(literal) == length && memcmp(name, literal, (size_t)length) == 0;
}

/* mindformers._apply_field: 0, 1 (too many named values: the Python way), -1 (error). */
static int
apply_field(StepColumns *self, Fields *fields, const uint8_t *name, Py_ssize_t name_length, const uint8_t *raw,
            Py_ssize_t raw_length)
{
    double value;
    int parsed;
    if (name_is(name, name_length, "loss")) {
        if ((fields->loss = parse_number(raw, raw_length, &fields->loss_value)) < 0) return -1;
    } else if (name_is(name, name_length, "lr")) {
        if ((fields->learning_rate = parse_number(raw, raw_length, &fields->learning_rate_value)) < 0) return -1;
    } else if (name_is(name, name_length, "grad_norm")) {
        if (raw_length == 3 && memcmp(raw, "NaN", 3) == 0) return 0; /* not obtained this step */
        if ((fields->grad_norm = parse_number(raw, raw_length, &fields->grad_norm_value)) < 0) return -1;
    } else if (name_is(name, name_length, "per_step_time")) {
        if ((fields->step_time = parse_duration(raw, raw_length, &fields->step_time_value)) < 0) return -1;
    } else if (name_is(name, name_length, "throughput")) {
        PyObject *unit;
        if ((parsed = parse_with_unit(self, raw, raw_length, &value, &unit)) < 0) return -1;
        if (parsed == 1) {
            fields->throughput = 1;
            fields->throughput_value = value;
            Py_XSETREF(fields->unit, unit);
        }
    } else {
        if ((parsed = parse_number(raw, raw_length, &value)) <= 0) return parsed;
        PyObject *key = name_of(self, name, name_length);
        if (key == NULL) return -1;
        for (int i = 0; i < fields->named_count; i++) {
            if (fields->named[i].name == key) { /* again on the line: the dict keeps its place */
                fields->named[i].value = value;
                Py_DECREF(key);
                return 0;
            }
        }
        if (fields->named_count == MAX_NAMED_PER_LINE) {
            Py_DECREF(key);
            return 1;
        }
        fields->named[fields->named_count].name = key;
        fields->named[fields->named_count].value = value;
        fields->named[fields->named_count].aux = name_length >= 5 && memcmp(name + name_length - 5, "_loss", 5) == 0;
        fields->named_count++;
    }
    return 0;
}

/* The fields of a record body (``_FIELD.findall``): 0, 1 (the Python way), or -1 on error. */
static int
parse_fields(StepColumns *self, Fields *fields, const uint8_t *at, const uint8_t *end)
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
        int applied = apply_field(self, fields, at, name_end - at, value, stripped - value);
        if (applied) return applied;
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
note_named(StepColumns *self, PyObject *name, double value)
{
    for (Py_ssize_t i = 0; i < self->named_count; i++) {
        if (self->named[i].name == name
            || (self->named[i].name != NULL && PyUnicode_Compare(self->named[i].name, name) == 0)) {
            self->named[i].value = value;
            self->named[i].rows++;
            return 0;
        }
    }
    if (self->named_count == self->named_capacity) {
        Py_ssize_t capacity = self->named_capacity ? 2 * self->named_capacity : 8;
        Named *grown = PyMem_Realloc(self->named, (size_t)capacity * sizeof(Named));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->named = grown;
        self->named_capacity = capacity;
    }
    self->named[self->named_count++] = (Named){Py_NewRef(name), value, 1};
    return 0;
}

static int
append_float(PyObject *list, double value)
{
    PyObject *number = PyFloat_FromDouble(value);
    if (number == NULL) return -1;
    int failed = PyList_Append(list, number);
    Py_DECREF(number);
    return failed;
}

/* One record into the columns: what applying its StepRecord would leave (StepColumns._append). */
static int
commit(StepColumns *self, long long step_number, long long total_steps, const Fields *fields)
{
    PyObject *step = PyLong_FromLongLong(step_number);
    if (step == NULL) return -1;
    int failed = PyList_Append(self->steps, step) < 0;
    self->has_total_steps = 1;
    self->total_steps = total_steps;
    if (fields->learning_rate == 1) {
        self->has_learning_rate = 1;
        self->learning_rate = fields->learning_rate_value;
    }
    if (fields->step_time == 1) {
        self->has_step_time = 1;
        self->step_time_seconds = fields->step_time_value;
    }
    if (fields->throughput == 1) {
        self->has_throughput = 1;
        self->throughput = fields->throughput_value;
        if (fields->unit) Py_XSETREF(self->throughput_unit, Py_NewRef(fields->unit));
    }
    for (int aux = 1; aux >= 0; aux--) { /* the aux losses first, as the state applies them */
        for (int i = 0; i < fields->named_count && !failed; i++) {
            if (fields->named[i].aux == aux) failed = note_named(self, fields->named[i].name, fields->named[i].value) < 0;
        }
    }
    if (!failed && fields->loss == 1) {
        failed = PyList_Append(self->loss_steps, step) < 0 || append_float(self->losses, fields->loss_value) < 0;
    }
    if (!failed && fields->grad_norm == 1) {
        failed = PyList_Append(self->grad_norm_steps, step) < 0 || append_float(self->grad_norms, fields->grad_norm_value) < 0;
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

/* 1: the line's record was added; 0: declined; -1: error. */
static int
add_line(StepColumns *self, const uint8_t *line, const uint8_t *end)
{
    if (!is_ascii(line, end)) return 0; /* decoding and Unicode \s, \d: the Python parser's */
    if (has_rank_prefix(line, end)) return 0;
    const uint8_t *brace = line;
    while ((brace = memchr(brace, '{', (size_t)(end - brace))) != NULL) {
        long long step, total;
        const uint8_t *body, *body_end;
        int found = match_record(brace, end, &step, &total, &body, &body_end);
        if (found < 0) return 0;
        if (found == 0) {
            brace++;
            continue;
        }
        Fields fields = {.loss = -1, .learning_rate = -1, .grad_norm = -1, .step_time = -1, .throughput = -1};
        int parsed = parse_fields(self, &fields, body, body_end);
        int failed = parsed < 0 || (parsed == 0 && commit(self, step, total, &fields) < 0);
        clear_fields(&fields);
        return failed ? -1 : parsed == 0;
    }
    return 0;
}

static PyObject *
StepColumns_add(StepColumns *self, PyObject *argument)
{
    if (!PyBytes_Check(argument)) {
        PyErr_SetString(PyExc_TypeError, "add() takes bytes");
        return NULL;
    }
    const uint8_t *line = (const uint8_t *)PyBytes_AS_STRING(argument);
    int added = add_line(self, line, line + PyBytes_GET_SIZE(argument));
    if (added < 0) return NULL;
    return PyBool_FromLong(added);
}

PyDoc_STRVAR(StepColumns_add_lines_doc,
"add_lines(data, starts, index) -> int\n\n"
"add() the lines of ``data`` starting at ``starts[index]``, ``starts[index + 1]``, ... up to\n"
"the first one declined; how many were added.");

static PyObject *
StepColumns_add_lines(StepColumns *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "add_lines(data, starts: list, index)");
        return NULL;
    }
    Py_ssize_t index = PyLong_AsSsize_t(args[2]);
    if (index == -1 && PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *data = view.buf, *data_end = data + view.len;
    PyObject *starts = args[1];
    Py_ssize_t taken = 0;
    for (Py_ssize_t i = index < 0 ? 0 : index; i < PyList_GET_SIZE(starts); i++, taken++) {
        Py_ssize_t start = PyLong_AsSsize_t(PyList_GET_ITEM(starts, i));
        if (start == -1 && PyErr_Occurred()) goto error;
        if (start < 0 || start > view.len) break;
        const uint8_t *end = memchr(data + start, '\n', (size_t)(view.len - start));
        int added = add_line(self, data + start, end ? end : data_end);
        if (added < 0) goto error;
        if (added == 0) break;
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(taken);
error:
    PyBuffer_Release(&view);
    return NULL;
}

static void
StepColumns_reset(StepColumns *self)
{
    Py_CLEAR(self->steps);
    Py_CLEAR(self->loss_steps);
    Py_CLEAR(self->losses);
    Py_CLEAR(self->grad_norm_steps);
    Py_CLEAR(self->grad_norms);
    Py_CLEAR(self->throughput_unit);
    self->has_total_steps = self->has_learning_rate = self->has_step_time = self->has_throughput = 0;
    for (Py_ssize_t i = 0; i < self->named_count; i++) Py_CLEAR(self->named[i].name);
    self->named_count = 0;
}

static int
StepColumns_start(StepColumns *self)
{
    self->steps = PyList_New(0);
    self->loss_steps = PyList_New(0);
    self->losses = PyList_New(0);
    self->grad_norm_steps = PyList_New(0);
    self->grad_norms = PyList_New(0);
    if (!self->steps || !self->loss_steps || !self->losses || !self->grad_norm_steps || !self->grad_norms) {
        StepColumns_reset(self);
        return -1;
    }
    return 0;
}

static PyObject *
float_or_none(int present, double value)
{
    return present ? PyFloat_FromDouble(value) : Py_NewRef(Py_None);
}

PyDoc_STRVAR(StepColumns_take_doc,
"take() -> StepBatch\n\nThe records added since the last take, as batch_type(...); the columns start empty again.");

static PyObject *
StepColumns_take(StepColumns *self, PyObject *unused)
{
    PyObject *named = PyDict_New();
    PyObject *total = self->has_total_steps ? PyLong_FromLongLong(self->total_steps) : Py_NewRef(Py_None);
    PyObject *learning_rate = float_or_none(self->has_learning_rate, self->learning_rate);
    PyObject *step_time = float_or_none(self->has_step_time, self->step_time_seconds);
    PyObject *throughput = float_or_none(self->has_throughput, self->throughput);
    PyObject *batch = NULL;
    if (!named || !total || !learning_rate || !step_time || !throughput) goto done;
    for (Py_ssize_t i = 0; i < self->named_count; i++) {
        PyObject *pair = Py_BuildValue("(dn)", self->named[i].value, self->named[i].rows);
        int failed = pair == NULL || PyDict_SetItem(named, self->named[i].name, pair) < 0;
        Py_XDECREF(pair);
        if (failed) goto done;
    }
    batch = PyObject_CallFunctionObjArgs(self->batch_type, self->steps, total, self->loss_steps, self->losses,
                                         self->grad_norm_steps, self->grad_norms, learning_rate, step_time, throughput,
                                         self->throughput_unit ? self->throughput_unit : Py_None, named, NULL);
    if (batch != NULL) {
        StepColumns_reset(self);
        if (StepColumns_start(self) < 0) Py_CLEAR(batch);
    }
done:
    Py_XDECREF(named);
    Py_XDECREF(total);
    Py_XDECREF(learning_rate);
    Py_XDECREF(step_time);
    Py_XDECREF(throughput);
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
    PyMem_Free(self->named);
    for (int i = 0; i < self->name_count; i++) Py_CLEAR(self->names[i]);
    Py_XDECREF(self->batch_type);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef StepColumns_methods[] = {
    {"add", (PyCFunction)StepColumns_add, METH_O, StepColumns_add_doc},
    {"add_lines", (PyCFunction)(void (*)(void))StepColumns_add_lines, METH_FASTCALL, StepColumns_add_lines_doc},
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
    have_avx2 = __builtin_cpu_supports("avx2");
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
