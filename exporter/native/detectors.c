/* Kernel: the per-step detectors over one series of values.
 *
 * Its pure-Python twin, exporter/native/detectors.py, defines the detectors and the tuples
 * their state travels in; this runs the same arithmetic in the same order on C doubles (built
 * with -ffp-contract=off: no fused multiply-add where Python rounds twice), and
 * tests/test_native.py checks both bit for bit. State comes in as tuples and goes out as new
 * tuples: nothing is changed in place, no attribute is read. A number beyond +-2**61 (a step,
 * a count, a window) raises OverflowError, and the caller runs the twin instead.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "doubles.h"

#define LIMIT (1LL << 61) /* step - window and counts + 1 stay far from overflow */

typedef struct {
    double relative_jump, deviations, alpha, min_relative_improvement, noise_deviations, plateau_alpha;
    long long warmup, max_excursion, window;
    double noise_root; /* sqrt(2 * plateau_alpha / (2 - plateau_alpha)): observe_plateau's, once a call */
} Config;

typedef struct {
    double mean, deviation;
    long long seen, excursion;
} Spikes;

typedef struct {
    int has_smoothed, has_best, has_best_smoothed;
    double smoothed, change, previous, best_smoothed;
    long long best_step;
    long long *history_steps;
    double *history_smoothed;
    Py_ssize_t head, tail; /* the window is [head, tail) */
} Plateau;

static int
as_double(PyObject *object, double *value)
{
    *value = PyFloat_AsDouble(object);
    return *value == -1.0 && PyErr_Occurred() ? -1 : 0;
}

static int
as_long(PyObject *object, long long *value)
{
    *value = PyLong_AsLongLong(object);
    if (*value == -1 && PyErr_Occurred()) return -1;
    if (*value > LIMIT || *value < -LIMIT) {
        PyErr_SetString(PyExc_OverflowError, "beyond the native detectors' range");
        return -1;
    }
    return 0;
}

/* A sequence of numbers read as doubles: an array('d') (the step kernel's series) through its buffer, any other
 * sequence item by item (its PySequence_Fast: an array would be copied into a list of floats first). */
typedef struct {
    PyObject *fast;
    Py_buffer buffer;
    const double *doubles; /* the buffer's */
    int buffered;
    Py_ssize_t count;
} Numbers;

static int
numbers_open(PyObject *given, const char *message, Numbers *numbers)
{
    *numbers = (Numbers){0};
    if (doubles_view(given, &numbers->buffer)) {
        numbers->doubles = numbers->buffer.buf;
        numbers->buffered = 1;
        numbers->count = numbers->buffer.len / (Py_ssize_t)sizeof(double);
        return 0;
    }
    numbers->fast = PySequence_Fast(given, message);
    if (numbers->fast == NULL) return -1;
    numbers->count = PySequence_Fast_GET_SIZE(numbers->fast);
    return 0;
}

static int
numbers_at(const Numbers *numbers, Py_ssize_t index, double *value)
{
    if (numbers->buffered) {
        *value = numbers->doubles[index];
        return 0;
    }
    return as_double(PySequence_Fast_GET_ITEM(numbers->fast, index), value);
}

static void
numbers_close(Numbers *numbers)
{
    if (numbers->buffered) PyBuffer_Release(&numbers->buffer);
    Py_CLEAR(numbers->fast);
    numbers->buffered = 0;
}

/* A series' steps: a range (the step kernel's run, its steps one difference apart) read by its first step and its
 * difference, without an int object each; any other sequence item by item (None: a line that printed no step). */
typedef struct {
    PyObject *fast;
    long long first, difference;
    Py_ssize_t count;
} Steps;

static int
steps_open(PyObject *given, const char *message, Steps *steps)
{
    *steps = (Steps){0};
    if (!PyRange_Check(given)) {
        steps->fast = PySequence_Fast(given, message);
        if (steps->fast == NULL) return -1;
        steps->count = PySequence_Fast_GET_SIZE(steps->fast);
        return 0;
    }
    steps->count = PyObject_Size(given);
    if (steps->count < 0) return -1;
    PyObject *first = PyObject_GetAttrString(given, "start"), *difference = PyObject_GetAttrString(given, "step");
    int failed = first == NULL || difference == NULL || as_long(first, &steps->first) < 0
                 || as_long(difference, &steps->difference) < 0;
    Py_XDECREF(first);
    Py_XDECREF(difference);
    if (failed) return -1;
    /* Its last step in range too: every step between is. */
    long long span = steps->count ? (long long)(steps->count - 1) : 0;
    if (steps->difference && span > LIMIT / (steps->difference < 0 ? -steps->difference : steps->difference)) {
        PyErr_SetString(PyExc_OverflowError, "beyond the native detectors' range");
        return -1;
    }
    long long last = steps->first + span * steps->difference;
    if (last > LIMIT || last < -LIMIT) {
        PyErr_SetString(PyExc_OverflowError, "beyond the native detectors' range");
        return -1;
    }
    return 0;
}

/* 1 and ``*step`` set for a step, 0 for a None, -1 with an exception set. */
static int
steps_at(const Steps *steps, Py_ssize_t index, long long *step)
{
    if (steps->fast == NULL) {
        *step = steps->first + (long long)index * steps->difference;
        return 1;
    }
    PyObject *item = PySequence_Fast_GET_ITEM(steps->fast, index);
    *step = 0;
    if (item == Py_None) return 0;
    return as_long(item, step) < 0 ? -1 : 1;
}

/* The step at ``index`` as an object (a new reference; NULL with an exception set). */
static PyObject *
steps_item(const Steps *steps, Py_ssize_t index)
{
    if (steps->fast == NULL) return PyLong_FromLongLong(steps->first + (long long)index * steps->difference);
    return Py_NewRef(PySequence_Fast_GET_ITEM(steps->fast, index));
}

static void
steps_close(Steps *steps)
{
    Py_CLEAR(steps->fast);
}

static PyObject *
tuple_of(PyObject *object, Py_ssize_t size, const char *what)
{
    if (!PyTuple_Check(object) || PyTuple_GET_SIZE(object) != size) {
        PyErr_Format(PyExc_TypeError, "%s must be a tuple of %zd", what, size);
        return NULL;
    }
    return object;
}

static int
read_config(PyObject *object, Config *c)
{
    PyObject *t = tuple_of(object, 9, "config");
    if (t == NULL || as_double(PyTuple_GET_ITEM(t, 0), &c->relative_jump) < 0
           || as_double(PyTuple_GET_ITEM(t, 1), &c->deviations) < 0 || as_long(PyTuple_GET_ITEM(t, 2), &c->warmup) < 0
           || as_double(PyTuple_GET_ITEM(t, 3), &c->alpha) < 0 || as_long(PyTuple_GET_ITEM(t, 4), &c->max_excursion) < 0
           || as_double(PyTuple_GET_ITEM(t, 5), &c->min_relative_improvement) < 0
           || as_double(PyTuple_GET_ITEM(t, 6), &c->noise_deviations) < 0 || as_long(PyTuple_GET_ITEM(t, 7), &c->window) < 0
           || as_double(PyTuple_GET_ITEM(t, 8), &c->plateau_alpha) < 0) {
        return -1;
    }
    c->noise_root = sqrt(2 * c->plateau_alpha / (2 - c->plateau_alpha));
    return 0;
}

static int
read_spikes(PyObject *object, Spikes *s)
{
    PyObject *t = tuple_of(object, 4, "spike state");
    return t == NULL || as_double(PyTuple_GET_ITEM(t, 0), &s->mean) < 0 || as_double(PyTuple_GET_ITEM(t, 1), &s->deviation) < 0
           || as_long(PyTuple_GET_ITEM(t, 2), &s->seen) < 0 || as_long(PyTuple_GET_ITEM(t, 3), &s->excursion) < 0
           ? -1 : 0;
}

/* The plateau state, with room for ``room`` more history entries. */
static int
read_plateau(PyObject *object, Plateau *p, Py_ssize_t room)
{
    PyObject *t = tuple_of(object, 7, "plateau state");
    if (t == NULL) return -1;
    PyObject *smoothed = PyTuple_GET_ITEM(t, 0), *best = PyTuple_GET_ITEM(t, 5), *best_smoothed = PyTuple_GET_ITEM(t, 6);
    p->has_smoothed = smoothed != Py_None;
    p->has_best = best != Py_None;
    p->has_best_smoothed = best_smoothed != Py_None;
    if ((p->has_smoothed && as_double(smoothed, &p->smoothed) < 0) || as_double(PyTuple_GET_ITEM(t, 1), &p->change) < 0
        || as_double(PyTuple_GET_ITEM(t, 2), &p->previous) < 0 || (p->has_best && as_long(best, &p->best_step) < 0)
        || (p->has_best_smoothed && as_double(best_smoothed, &p->best_smoothed) < 0)) {
        return -1;
    }
    PyObject *steps = PySequence_Fast(PyTuple_GET_ITEM(t, 3), "history steps must be a sequence");
    PyObject *values = steps ? PySequence_Fast(PyTuple_GET_ITEM(t, 4), "history values must be a sequence") : NULL;
    int failed = values == NULL;
    Py_ssize_t count = failed ? 0 : PySequence_Fast_GET_SIZE(steps);
    if (!failed && PySequence_Fast_GET_SIZE(values) != count) {
        PyErr_SetString(PyExc_ValueError, "history steps and values differ in length");
        failed = 1;
    }
    if (!failed) {
        /* Written before read: the history's entries, then each value's as it comes. */
        p->history_steps = PyMem_Malloc((size_t)(count + room + 1) * sizeof(long long));
        p->history_smoothed = PyMem_Malloc((size_t)(count + room + 1) * sizeof(double));
        if (p->history_steps == NULL || p->history_smoothed == NULL) {
            PyErr_NoMemory();
            failed = 1;
        }
    }
    for (Py_ssize_t i = 0; !failed && i < count; i++) {
        failed = as_long(PySequence_Fast_GET_ITEM(steps, i), &p->history_steps[i]) < 0
                 || as_double(PySequence_Fast_GET_ITEM(values, i), &p->history_smoothed[i]) < 0;
    }
    p->head = 0;
    p->tail = count;
    Py_XDECREF(steps);
    Py_XDECREF(values);
    return failed ? -1 : 0;
}

/* _Spikes.observe; SPREAD_FALL is detectors.py's _SPREAD_FALL */
#define SPREAD_FALL 0.2

static int
observe_spike(Spikes *s, const Config *c, double value)
{
    if (s->seen == 0) {
        s->mean = value;
        s->seen = 1;
        return 0;
    }
    double jump = value - s->mean;
    if (s->seen >= c->warmup && jump > c->relative_jump * fabs(s->mean) && jump > c->deviations * s->deviation) {
        s->excursion += 1;
        if (s->excursion < c->max_excursion) return s->excursion == 1;
        s->mean = value;
        s->excursion = 0;
        return 0;
    }
    s->excursion = 0;
    /* The spread rises at alpha, falls at a fifth of it: an envelope of the recent noise (see the twin). */
    double rate = fabs(jump) > s->deviation ? c->alpha : c->alpha * SPREAD_FALL;
    double deviation = s->deviation + rate * (fabs(jump) - s->deviation);
    double mean = s->mean + c->alpha * jump;
    if (!(isfinite(deviation) && isfinite(mean))) { /* overflowed near DBL_MAX: start afresh */
        s->mean = 0.0;
        s->deviation = 0.0;
        s->seen = 0;
        return 0;
    }
    s->deviation = deviation;
    s->mean = mean;
    s->seen += 1;
    return 0;
}

/* _Plateau._clearly_below; ``needed`` is Python's max(relative, deviations): the first unless the second is greater. */
static int
clearly_below(const Plateau *p, double reference, const Config *c, double deviations)
{
    double relative = c->min_relative_improvement * fabs(reference);
    double needed = deviations > relative ? deviations : relative;
    return reference - p->smoothed > needed;
}

/* _Plateau._progress */
static void
progress(Plateau *p, long long step)
{
    p->best_step = step;
    p->has_best = 1;
    p->best_smoothed = p->smoothed;
    p->has_best_smoothed = 1;
}

/* _Plateau.observe; ``has_step`` false: the rank's step is unknown. */
static void
observe_plateau(Plateau *p, const Config *c, int has_step, long long step, double value)
{
    double alpha = c->plateau_alpha;
    if (!p->has_smoothed) {
        p->smoothed = value;
        p->has_smoothed = 1;
    } else {
        double change = p->change + alpha * (fabs(value - p->previous) - p->change);
        double smoothed = p->smoothed + alpha * (value - p->smoothed);
        if (!(isfinite(change) && isfinite(smoothed))) { /* overflowed near DBL_MAX: start afresh */
            p->has_smoothed = 0;
            p->change = 0.0;
            p->previous = value;
            p->head = p->tail;
            return;
        }
        p->change = change;
        p->smoothed = smoothed;
    }
    p->previous = value;
    if (!has_step) return;
    if (p->tail > p->head && p->history_steps[p->tail - 1] == step) {
        p->history_smoothed[p->tail - 1] = p->smoothed; /* the same step again: one entry a step, memory bounded */
    } else {
        p->history_steps[p->tail] = step;
        p->history_smoothed[p->tail] = p->smoothed;
        p->tail++;
    }
    while (p->tail - p->head > 1 && p->history_steps[p->head + 1] <= step - c->window) p->head++;
    long long reference_step = p->history_steps[p->head];
    double reference = p->history_smoothed[p->head];
    if (reference_step > step - c->window) {
        progress(p, step);
        return;
    }
    double noise = p->change * sqrt(M_PI) / 2 * c->noise_root;
    double deviations = c->noise_deviations * noise;
    if (clearly_below(p, reference, c, deviations) || (p->has_best_smoothed && clearly_below(p, p->best_smoothed, c, deviations))) {
        progress(p, step);
    }
}

static PyObject *
spikes_state(const Spikes *s)
{
    return Py_BuildValue("(ddLL)", s->mean, s->deviation, s->seen, s->excursion);
}

static PyObject *
plateau_state(const Plateau *p)
{
    PyObject *steps = PyList_New(p->tail - p->head), *values = PyList_New(p->tail - p->head);
    if (steps == NULL || values == NULL) goto fail;
    for (Py_ssize_t i = p->head; i < p->tail; i++) {
        PyObject *step = PyLong_FromLongLong(p->history_steps[i]);
        PyObject *value = PyFloat_FromDouble(p->history_smoothed[i]);
        if (step) PyList_SET_ITEM(steps, i - p->head, step);
        if (value) PyList_SET_ITEM(values, i - p->head, value);
        if (step == NULL || value == NULL) goto fail;
    }
    PyObject *smoothed = p->has_smoothed ? PyFloat_FromDouble(p->smoothed) : Py_NewRef(Py_None);
    PyObject *best = p->has_best ? PyLong_FromLongLong(p->best_step) : Py_NewRef(Py_None);
    PyObject *best_smoothed = p->has_best_smoothed ? PyFloat_FromDouble(p->best_smoothed) : Py_NewRef(Py_None);
    if (smoothed == NULL || best == NULL || best_smoothed == NULL) {
        Py_XDECREF(smoothed);
        Py_XDECREF(best);
        Py_XDECREF(best_smoothed);
        goto fail;
    }
    return Py_BuildValue("(NddNNNN)", smoothed, p->change, p->previous, steps, values, best, best_smoothed);
fail:
    Py_XDECREF(steps);
    Py_XDECREF(values);
    return NULL;
}

PyDoc_STRVAR(check_series_doc,
"check_series(config, spikes, plateau, steps, values)\n"
"    -> (nonfinite, last_nonfinite_step, spiked, spike_steps, spikes, plateau)\n\n"
"The detectors over one series: see exporter/native/detectors.py.");

static PyObject *
check_series(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "check_series takes 5 arguments");
        return NULL;
    }
    Steps steps = {0};
    Numbers values = {0};
    PyObject *result = NULL, *spike_steps = NULL, *last_step = NULL;
    long long *step_numbers = NULL;
    unsigned char *has_steps = NULL;
    double *numbers = NULL;
    Config config;
    Spikes spikes = {0};
    Plateau plateau = {0};
    int has_spikes = args[1] != Py_None, has_plateau = args[2] != Py_None;
    if (steps_open(args[3], "steps must be a sequence", &steps) < 0
        || numbers_open(args[4], "values must be a sequence", &values) < 0 || read_config(args[0], &config) < 0) {
        goto done;
    }
    Py_ssize_t count = values.count;
    if (steps.count < count) count = steps.count; /* zip() */
    step_numbers = PyMem_Malloc(((size_t)count + 1) * sizeof(long long));
    has_steps = PyMem_Malloc((size_t)count + 1);
    /* The kernel's array('d') is read where it is; any other sequence copied as doubles. */
    numbers = values.buffered ? NULL : PyMem_Malloc(((size_t)count + 1) * sizeof(double));
    if (step_numbers == NULL || has_steps == NULL || (numbers == NULL && !values.buffered)) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        int has_step = steps_at(&steps, i, &step_numbers[i]);
        if (has_step < 0 || (numbers != NULL && numbers_at(&values, i, &numbers[i]) < 0)) goto done;
        has_steps[i] = (unsigned char)has_step;
    }
    const double *series = numbers != NULL ? numbers : values.doubles;
    if ((has_spikes && read_spikes(args[1], &spikes) < 0) || (has_plateau && read_plateau(args[2], &plateau, count) < 0)) {
        goto done;
    }
    Py_ssize_t nonfinite = 0, spiked = 0, last_nonfinite = -1;
    spike_steps = PyList_New(0);
    if (spike_steps == NULL) goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!isfinite(series[i])) {
            nonfinite++;
            if (has_steps[i]) last_nonfinite = i;
            continue;
        }
        if (!has_spikes) {
            PyErr_SetString(PyExc_ValueError, "a finite value needs a spike detector");
            goto done;
        }
        if (observe_spike(&spikes, &config, series[i])) {
            spiked++;
            PyObject *step = steps_item(&steps, i);
            int appended = step != NULL ? PyList_Append(spike_steps, step) : -1;
            Py_XDECREF(step);
            if (appended < 0) goto done;
        }
        if (has_plateau && spikes.excursion == 0) {
            observe_plateau(&plateau, &config, has_steps[i], step_numbers[i], series[i]);
        }
    }
    last_step = last_nonfinite < 0 ? Py_NewRef(Py_None) : steps_item(&steps, last_nonfinite);
    PyObject *spike_result = has_spikes ? spikes_state(&spikes) : Py_NewRef(Py_None);
    PyObject *plateau_result = has_plateau ? plateau_state(&plateau) : Py_NewRef(Py_None);
    if (last_step != NULL && spike_result != NULL && plateau_result != NULL) {
        result = Py_BuildValue("(nOnOOO)", nonfinite, last_step, spiked, spike_steps, spike_result, plateau_result);
    }
    Py_XDECREF(spike_result);
    Py_XDECREF(plateau_result);
done:
    Py_XDECREF(spike_steps);
    Py_XDECREF(last_step);
    PyMem_Free(step_numbers);
    PyMem_Free(has_steps);
    PyMem_Free(numbers);
    PyMem_Free(plateau.history_steps);
    PyMem_Free(plateau.history_smoothed);
    steps_close(&steps);
    numbers_close(&values);
    return result;
}

/* ------------------------------------------------------------------------------------------ */
/* The slowdown detector and the split of step time (check_step_times in detectors.py)        */

static int
compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* _median: the values are times, never NaN. */
static double
median(double *values, Py_ssize_t count)
{
    qsort(values, (size_t)count, sizeof(double), compare_doubles);
    Py_ssize_t middle = count / 2;
    return count % 2 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

PyDoc_STRVAR(check_step_times_doc,
"check_step_times(config, slowdown, steps, values, spans, productive, checkpoint)\n"
"    -> (slowdowns, last_slowdown_step, productive, checkpoint, slowdown)\n\n"
"The slowdown detector over one series of step times: see exporter/native/detectors.py.");

static PyObject *
check_step_times(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "check_step_times takes 7 arguments");
        return NULL;
    }
    double factor, alpha, baseline, held, held_span, productive, checkpoint;
    long long needed, warmup_steps, seen, slow_run;
    PyObject *config = tuple_of(args[0], 4, "config"), *state = tuple_of(args[1], 7, "slowdown state");
    if (config == NULL || state == NULL || as_double(PyTuple_GET_ITEM(config, 0), &factor) < 0
        || as_long(PyTuple_GET_ITEM(config, 1), &needed) < 0 || as_long(PyTuple_GET_ITEM(config, 2), &warmup_steps) < 0
        || as_double(PyTuple_GET_ITEM(config, 3), &alpha) < 0 || as_double(PyTuple_GET_ITEM(state, 0), &baseline) < 0
        || as_long(PyTuple_GET_ITEM(state, 1), &seen) < 0 || as_long(PyTuple_GET_ITEM(state, 2), &slow_run) < 0
        || as_double(PyTuple_GET_ITEM(state, 3), &held) < 0 || as_double(PyTuple_GET_ITEM(state, 6), &held_span) < 0
        || as_double(args[5], &productive) < 0 || as_double(args[6], &checkpoint) < 0) {
        return NULL;
    }
    int in_slowdown = PyObject_IsTrue(PyTuple_GET_ITEM(state, 4));
    if (in_slowdown < 0) return NULL;
    Steps steps = {0};
    Numbers values = {0}, spans = {0};
    int opened = steps_open(args[2], "steps must be a sequence", &steps) == 0
                 && numbers_open(args[3], "values must be a sequence", &values) == 0
                 && numbers_open(args[4], "spans must be a sequence", &spans) == 0;
    PyObject *warm = opened ? PySequence_Fast(PyTuple_GET_ITEM(state, 5), "warmup must be a sequence") : NULL;
    PyObject *result = NULL, *warm_out = NULL, *last_step = NULL;
    double *warmup = NULL;
    if (warm == NULL) goto done;
    Py_ssize_t count = values.count;
    if (steps.count < count) count = steps.count; /* zip() */
    if (spans.count < count) count = spans.count;
    Py_ssize_t warm_count = PySequence_Fast_GET_SIZE(warm);
    warmup = PyMem_Calloc((size_t)(warm_count + count + 1), sizeof(double));
    if (warmup == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < warm_count; i++) {
        if (as_double(PySequence_Fast_GET_ITEM(warm, i), &warmup[i]) < 0) goto done;
    }
    Py_ssize_t slowdowns = 0, last_slowdown = -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        long long step_number;
        double value, span;
        int has_step = steps_at(&steps, i, &step_number);
        if (has_step < 0 || numbers_at(&values, i, &value) < 0 || numbers_at(&spans, i, &span) < 0) goto done;
        if (!(value > 0 && value < INFINITY)) continue; /* not a time (NaN fails every comparison) */
        if (seen < warmup_steps) {
            productive += value * span;
            warmup[warm_count++] = value;
            seen += 1;
            if (seen == warmup_steps) {
                baseline = median(warmup, warm_count);
                warm_count = 0;
            }
            continue;
        }
        if (value > factor * baseline) {
            slow_run += 1;
            if (slow_run == 1) {
                held = value;
                held_span = span;
            } else {
                if (slow_run == 2) {
                    productive += held * held_span;
                    held = 0.0;
                }
                productive += value * span;
            }
            if (slow_run == needed && !in_slowdown) {
                in_slowdown = 1;
                slowdowns++;
                if (has_step) last_slowdown = i;
            }
            continue;
        }
        if (slow_run == 1) {
            productive += baseline * held_span;
            checkpoint += (held - baseline) * held_span;
            held = 0.0;
        }
        slow_run = 0;
        in_slowdown = 0;
        productive += value * span;
        baseline += alpha * (value - baseline);
        seen += 1;
    }
    warm_out = PyList_New(warm_count);
    if (warm_out == NULL) goto done;
    for (Py_ssize_t i = 0; i < warm_count; i++) {
        PyObject *number = PyFloat_FromDouble(warmup[i]);
        if (number == NULL) goto done;
        PyList_SET_ITEM(warm_out, i, number);
    }
    last_step = last_slowdown < 0 ? Py_NewRef(Py_None) : steps_item(&steps, last_slowdown);
    if (last_step == NULL) goto done;
    result = Py_BuildValue("(nOdd(dLLdOOd))", slowdowns, last_step, productive,
                           checkpoint, baseline, seen, slow_run, held, in_slowdown ? Py_True : Py_False, warm_out,
                           held_span);
done:
    PyMem_Free(warmup);
    Py_XDECREF(warm_out);
    Py_XDECREF(last_step);
    Py_XDECREF(warm);
    numbers_close(&spans);
    steps_close(&steps);
    numbers_close(&values);
    return result;
}

/* ------------------------------------------------------------------------------------------ */
/* The seconds a batch's step times stand for (covered in detectors.py)                       */

/* math.fsum's partials (Shewchuk's exact sum, CPython's Modules/mathmodule.c): with its final half-even
   correction the result is the one fsum gives, bit for bit. */
#define FIRST_PARTIALS 32

PyDoc_STRVAR(covered_doc,
"covered(seconds, spans) -> float\n\n"
"math.fsum of value * span over the step times that are times (0 < value < inf); inf where that sum\n"
"overflows (fsum raises). Two sequences of equal length: see exporter/native/detectors.py.");

static PyObject *
covered(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "covered takes 2 arguments");
        return NULL;
    }
    double first[FIRST_PARTIALS], *partials = first, special = 0.0, infinite = 0.0;
    Numbers seconds = {0}, spans = {0};
    if (numbers_open(args[0], "seconds must be a sequence", &seconds) < 0
        || numbers_open(args[1], "spans must be a sequence", &spans) < 0) {
        goto fail;
    }
    Py_ssize_t count = seconds.count;
    if (spans.count != count) {
        PyErr_SetString(PyExc_ValueError, "covered: seconds and spans differ in length");
        goto fail;
    }
    Py_ssize_t used = 0, room = FIRST_PARTIALS;
    for (Py_ssize_t k = 0; k < count; k++) {
        double value, span;
        if (numbers_at(&seconds, k, &value) < 0 || numbers_at(&spans, k, &span) < 0) goto fail;
        if (!(value > 0 && value < INFINITY)) continue; /* not a time (NaN fails every comparison) */
        double x = value * span, saved = x;
        Py_ssize_t i = 0;
        for (Py_ssize_t j = 0; j < used; j++) {
            double y = partials[j];
            if (fabs(x) < fabs(y)) {
                double t = x;
                x = y;
                y = t;
            }
            double high = x + y, low = y - (high - x);
            if (low != 0.0) partials[i++] = low;
            x = high;
        }
        used = i;
        if (x == 0.0) continue;
        if (!isfinite(x)) {
            if (isfinite(saved)) { /* the sum overflowed: fsum raises, the seconds are too many to count */
                special = INFINITY;
                infinite = INFINITY;
                break;
            }
            if (isinf(saved)) infinite += saved;
            special += saved;
            used = 0;
            continue;
        }
        if (used >= room) {
            double *grown = PyMem_Malloc(sizeof(double) * (size_t)room * 2);
            if (grown == NULL) {
                PyErr_NoMemory();
                goto fail;
            }
            memcpy(grown, partials, sizeof(double) * (size_t)used);
            if (partials != first) PyMem_Free(partials);
            partials = grown;
            room *= 2;
        }
        partials[used++] = x;
    }
    PyObject *result = NULL;
    if (special != 0.0) {
        if (isnan(infinite)) {
            PyErr_SetString(PyExc_ValueError, "-inf + inf in fsum");
        } else {
            result = PyFloat_FromDouble(special);
        }
    } else {
        double high = 0.0, low = 0.0;
        Py_ssize_t n = used;
        if (n > 0) {
            high = partials[--n];
            while (n > 0) { /* the exact sum from the top, until it is inexact */
                double x = high, y = partials[--n];
                high = x + y;
                low = y - (high - x);
                if (low != 0.0) break;
            }
            /* half-even rounding across partials, as fsum does */
            if (n > 0 && ((low < 0.0 && partials[n - 1] < 0.0) || (low > 0.0 && partials[n - 1] > 0.0))) {
                double y = low * 2.0, x = high + y;
                if (y == x - high) high = x;
            }
        }
        result = PyFloat_FromDouble(high);
    }
    if (partials != first) PyMem_Free(partials);
    numbers_close(&seconds);
    numbers_close(&spans);
    return result;
fail:
    if (partials != first) PyMem_Free(partials);
    numbers_close(&seconds);
    numbers_close(&spans);
    return NULL;
}

PyDoc_STRVAR(consecutive_doc,
"consecutive(steps: list | range) -> bool\n\n"
"True when every item is an int, each one more than the one before it (an empty list: False; a None: False).\n"
"OverflowError for a step beyond 64 bits (the twin's integers are unbounded).");

static PyObject *
consecutive(PyObject *module, PyObject *steps)
{
    if (PyRange_Check(steps)) { /* the step kernel's run: one step after the other where its difference is one */
        Steps ranged;
        if (steps_open(steps, "", &ranged) < 0) return NULL;
        return PyBool_FromLong(ranged.count > 0 && (ranged.difference == 1 || ranged.count == 1));
    }
    if (!PyList_Check(steps)) {
        PyErr_SetString(PyExc_TypeError, "consecutive: steps is a list or a range");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(steps);
    long long previous = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyList_GET_ITEM(steps, i);
        if (item == Py_None) Py_RETURN_FALSE;
        if (!PyLong_Check(item)) {
            PyErr_Format(PyExc_TypeError, "consecutive: a step is an int or None, not %.100s", Py_TYPE(item)->tp_name);
            return NULL;
        }
        int overflow;
        long long step = PyLong_AsLongLongAndOverflow(item, &overflow);
        if (overflow || step == LLONG_MIN || step == LLONG_MAX) {
            PyErr_SetString(PyExc_OverflowError, "beyond the native detectors' range");
            return NULL;
        }
        if (step == -1 && PyErr_Occurred()) return NULL;
        if (i && step != previous + 1) Py_RETURN_FALSE;
        previous = step;
    }
    return PyBool_FromLong(count > 0);
}

PyDoc_STRVAR(extent_doc,
"extent(values) -> (lowest, highest) | None\n\n"
"The least and the greatest of the finite values, as min() and max() of them give them (the first of equal\n"
"ones); None when none is finite. See exporter/native/detectors.py.");

static PyObject *
extent(PyObject *module, PyObject *given)
{
    Numbers values = {0};
    if (numbers_open(given, "values must be a sequence", &values) < 0) return NULL;
    double lowest = 0.0, highest = 0.0, value;
    int found = 0;
    for (Py_ssize_t i = 0; i < values.count; i++) {
        if (numbers_at(&values, i, &value) < 0) {
            numbers_close(&values);
            return NULL;
        }
        if (!isfinite(value)) continue;
        if (!found) {
            lowest = highest = value;
            found = 1;
        }
        else if (value < lowest) lowest = value;
        else if (value > highest) highest = value;
    }
    numbers_close(&values);
    if (!found) Py_RETURN_NONE;
    return Py_BuildValue("(dd)", lowest, highest);
}

PyDoc_STRVAR(steps_counted_doc,
"steps_counted(step_before, steps: list | range) -> int\n\n"
"How many steps the lines printed: each line whose step is not the one known before it (a line\n"
"printing no step, None, is a step). See exporter/native/detectors.py.");

static PyObject *
steps_counted(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !(PyList_Check(args[1]) || PyRange_Check(args[1]))) {
        PyErr_SetString(PyExc_TypeError, "steps_counted takes a step (or None) and a list or a range");
        return NULL;
    }
    if (PyRange_Check(args[1])) { /* steps one difference apart: each a step of its own, the first maybe the known */
        Py_ssize_t count = PyObject_Size(args[1]);
        if (count <= 0) return count < 0 ? NULL : PyLong_FromSsize_t(0);
        PyObject *first = PySequence_GetItem(args[1], 0);
        int differs = first != NULL ? PyObject_RichCompareBool(first, args[0], Py_NE) : -1;
        Py_XDECREF(first);
        if (differs < 0) return NULL;
        /* A difference of 0 is no range; a negative one makes every step one of its own too. */
        return PyLong_FromSsize_t(count - 1 + differs);
    }
    PyObject *steps = args[1], *known = Py_NewRef(args[0]);
    Py_ssize_t counted = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(steps); i++) {
        PyObject *step = PyList_GET_ITEM(steps, i);
        if (step == Py_None) {
            counted++;
            continue;
        }
        int differs = PyObject_RichCompareBool(step, known, Py_NE); /* the same object: equal, not compared */
        if (differs < 0) {
            Py_DECREF(known);
            return NULL;
        }
        counted += differs;
        Py_SETREF(known, Py_NewRef(step));
    }
    Py_DECREF(known);
    return PyLong_FromSsize_t(counted);
}

static PyMethodDef methods[] = {
    {"check_series", (PyCFunction)(void (*)(void))check_series, METH_FASTCALL, check_series_doc},
    {"check_step_times", (PyCFunction)(void (*)(void))check_step_times, METH_FASTCALL, check_step_times_doc},
    {"consecutive", consecutive, METH_O, consecutive_doc},
    {"covered", (PyCFunction)(void (*)(void))covered, METH_FASTCALL, covered_doc},
    {"steps_counted", (PyCFunction)(void (*)(void))steps_counted, METH_FASTCALL, steps_counted_doc},
    {"extent", (PyCFunction)extent, METH_O, extent_doc},
    {NULL},
};

static struct PyModuleDef detectors_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "exporter.native._detectors",
    .m_doc = "Kernel: the per-step detectors over one series (twin: exporter/native/detectors.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__detectors(void)
{
    return PyModule_Create(&detectors_module);
}
