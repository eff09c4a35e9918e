/* Native twin of exporter.state.detectors.check_series: the per-step detector loop.
 *
 * The detectors are the Python objects of state/detectors.py; this reads their state once,
 * runs the same arithmetic in the same order on C doubles (bit for bit the same results,
 * which tests/test_detectors_native.py checks), and writes the state back. Nothing is
 * changed unless every input converted: a step that does not fit in 64 bits raises
 * OverflowError before anything is touched, and the caller runs the Python loop instead.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

typedef struct {
    double relative_jump, deviations, alpha;
    long long warmup, max_excursion;
    double mean, deviation;
    long long seen, excursion;
} Spikes;

typedef struct {
    double alpha, min_relative_improvement, noise_deviations;
    long long window;
    int has_smoothed;
    double smoothed, change, previous;
    long long *history_steps;
    double *history_smoothed;
    Py_ssize_t head, tail; /* the deque is [head, tail) */
    int has_best;
    long long best_step;
} Plateau;

static int
get_double(PyObject *object, const char *name, double *value)
{
    PyObject *attribute = PyObject_GetAttrString(object, name);
    if (attribute == NULL) return -1;
    *value = PyFloat_AsDouble(attribute);
    Py_DECREF(attribute);
    return *value == -1.0 && PyErr_Occurred() ? -1 : 0;
}

static int
get_long(PyObject *object, const char *name, long long *value)
{
    PyObject *attribute = PyObject_GetAttrString(object, name);
    if (attribute == NULL) return -1;
    *value = PyLong_AsLongLong(attribute);
    Py_DECREF(attribute);
    return *value == -1 && PyErr_Occurred() ? -1 : 0;
}

static int
set_new(PyObject *object, const char *name, PyObject *value)
{
    if (value == NULL) return -1;
    int failed = PyObject_SetAttrString(object, name, value);
    Py_DECREF(value);
    return failed;
}

static int
read_spikes(PyObject *detector, Spikes *spikes)
{
    PyObject *config = PyObject_GetAttrString(detector, "_config");
    if (config == NULL) return -1;
    int failed = get_double(config, "spike_min_relative_jump", &spikes->relative_jump) < 0
                 || get_double(config, "spike_deviations", &spikes->deviations) < 0
                 || get_double(config, "spike_baseline_alpha", &spikes->alpha) < 0
                 || get_long(config, "spike_warmup_steps", &spikes->warmup) < 0
                 || get_long(config, "spike_max_excursion_steps", &spikes->max_excursion) < 0;
    Py_DECREF(config);
    return failed || get_double(detector, "_mean", &spikes->mean) < 0
           || get_double(detector, "_deviation", &spikes->deviation) < 0
           || get_long(detector, "_seen", &spikes->seen) < 0 || get_long(detector, "_excursion", &spikes->excursion) < 0
           ? -1 : 0;
}

static int
write_spikes(PyObject *detector, const Spikes *spikes)
{
    return set_new(detector, "_mean", PyFloat_FromDouble(spikes->mean)) < 0
           || set_new(detector, "_deviation", PyFloat_FromDouble(spikes->deviation)) < 0
           || set_new(detector, "_seen", PyLong_FromLongLong(spikes->seen)) < 0
           || set_new(detector, "_excursion", PyLong_FromLongLong(spikes->excursion)) < 0
           ? -1 : 0;
}

/* SpikeDetector.observe */
static int
observe_spike(Spikes *s, double value)
{
    if (s->seen == 0) {
        s->mean = value;
        s->seen = 1;
        return 0;
    }
    double jump = value - s->mean;
    int is_spike = s->seen >= s->warmup && jump > s->relative_jump * fabs(s->mean) && jump > s->deviations * s->deviation;
    if (is_spike) {
        s->excursion += 1;
        if (s->excursion < s->max_excursion) return s->excursion == 1;
        s->mean = value;
        s->excursion = 0;
        return 0;
    }
    s->excursion = 0;
    s->deviation += s->alpha * (fabs(jump) - s->deviation);
    s->mean += s->alpha * jump;
    s->seen += 1;
    return 0;
}

static int
read_plateau(PyObject *tracker, Plateau *p, Py_ssize_t room)
{
    PyObject *config = PyObject_GetAttrString(tracker, "_config");
    if (config == NULL) return -1;
    int failed = get_double(config, "plateau_alpha", &p->alpha) < 0
                 || get_double(config, "plateau_min_relative_improvement", &p->min_relative_improvement) < 0
                 || get_double(config, "plateau_noise_deviations", &p->noise_deviations) < 0
                 || get_long(config, "plateau_window_steps", &p->window) < 0;
    Py_DECREF(config);
    if (failed || get_double(tracker, "_change", &p->change) < 0 || get_double(tracker, "_previous", &p->previous) < 0) {
        return -1;
    }
    PyObject *smoothed = PyObject_GetAttrString(tracker, "_smoothed");
    if (smoothed == NULL) return -1;
    p->has_smoothed = smoothed != Py_None;
    p->smoothed = p->has_smoothed ? PyFloat_AsDouble(smoothed) : 0.0;
    Py_DECREF(smoothed);
    if (p->smoothed == -1.0 && PyErr_Occurred()) return -1;
    PyObject *best = PyObject_GetAttrString(tracker, "best_step");
    if (best == NULL) return -1;
    p->has_best = best != Py_None;
    p->best_step = p->has_best ? PyLong_AsLongLong(best) : 0;
    Py_DECREF(best);
    if (p->best_step == -1 && PyErr_Occurred()) return -1;
    PyObject *history = PyObject_GetAttrString(tracker, "_history");
    if (history == NULL) return -1;
    PyObject *items = PySequence_Fast(history, "history must be a sequence");
    Py_DECREF(history);
    if (items == NULL) return -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(items);
    p->history_steps = PyMem_Calloc(count + room + 1, sizeof(long long));
    p->history_smoothed = PyMem_Calloc(count + room + 1, sizeof(double));
    if (p->history_steps == NULL || p->history_smoothed == NULL) {
        Py_DECREF(items);
        PyErr_NoMemory();
        return -1;
    }
    p->head = 0;
    p->tail = count;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *entry = PySequence_Fast_GET_ITEM(items, i);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2) {
            Py_DECREF(items);
            PyErr_SetString(PyExc_TypeError, "history entries must be (step, smoothed)");
            return -1;
        }
        p->history_steps[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(entry, 0));
        p->history_smoothed[i] = PyFloat_AsDouble(PyTuple_GET_ITEM(entry, 1));
        if (PyErr_Occurred()) {
            Py_DECREF(items);
            return -1;
        }
    }
    Py_DECREF(items);
    return 0;
}

static int
write_plateau(PyObject *tracker, const Plateau *p)
{
    if ((p->has_smoothed && set_new(tracker, "_smoothed", PyFloat_FromDouble(p->smoothed)) < 0)
        || set_new(tracker, "_change", PyFloat_FromDouble(p->change)) < 0
        || set_new(tracker, "_previous", PyFloat_FromDouble(p->previous)) < 0
        || (p->has_best && set_new(tracker, "best_step", PyLong_FromLongLong(p->best_step)) < 0)) {
        return -1;
    }
    PyObject *history = PyObject_GetAttrString(tracker, "_history");
    if (history == NULL) return -1;
    PyObject *entries = PyList_New(p->tail - p->head);
    if (entries == NULL) {
        Py_DECREF(history);
        return -1;
    }
    for (Py_ssize_t i = p->head; i < p->tail; i++) {
        PyObject *entry = Py_BuildValue("(Ld)", p->history_steps[i], p->history_smoothed[i]);
        if (entry == NULL) {
            Py_DECREF(entries);
            Py_DECREF(history);
            return -1;
        }
        PyList_SET_ITEM(entries, i - p->head, entry);
    }
    PyObject *cleared = PyObject_CallMethod(history, "clear", NULL);
    PyObject *extended = cleared ? PyObject_CallMethod(history, "extend", "O", entries) : NULL;
    Py_XDECREF(cleared);
    Py_DECREF(entries);
    Py_DECREF(history);
    if (extended == NULL) return -1;
    Py_DECREF(extended);
    return 0;
}

/* PlateauTracker.observe; ``has_step`` false: the rank's step is unknown. */
static void
observe_plateau(Plateau *p, int has_step, long long step, double loss)
{
    double alpha = p->alpha;
    if (!p->has_smoothed) {
        p->smoothed = loss;
        p->has_smoothed = 1;
    } else {
        p->change += alpha * (fabs(loss - p->previous) - p->change);
        p->smoothed += alpha * (loss - p->smoothed);
    }
    p->previous = loss;
    if (!has_step) return;
    p->history_steps[p->tail] = step;
    p->history_smoothed[p->tail] = p->smoothed;
    p->tail++;
    while (p->tail - p->head > 1 && p->history_steps[p->head + 1] <= step - p->window) p->head++;
    long long reference_step = p->history_steps[p->head];
    double reference = p->history_smoothed[p->head];
    if (reference_step > step - p->window) {
        p->best_step = step;
        p->has_best = 1;
        return;
    }
    double noise = p->change * sqrt(M_PI) / 2 * sqrt(2 * alpha / (2 - alpha));
    double relative = p->min_relative_improvement * fabs(reference), deviations = p->noise_deviations * noise;
    double needed = deviations > relative ? deviations : relative; /* Python's max() */
    if (reference - p->smoothed > needed) {
        p->best_step = step;
        p->has_best = 1;
    }
}

PyDoc_STRVAR(check_series_doc,
"check_series(spikes, plateau, steps, values) -> (nonfinite, last_nonfinite_step, spikes, last_spike_step)\n\n"
"The native twin of exporter.state.detectors.check_series.");

static PyObject *
check_series(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "check_series takes 4 arguments");
        return NULL;
    }
    PyObject *spike_detector = args[0], *tracker = args[1];
    PyObject *steps = PySequence_Fast(args[2], "steps must be a sequence");
    PyObject *values = steps ? PySequence_Fast(args[3], "values must be a sequence") : NULL;
    PyObject *result = NULL;
    long long *step_numbers = NULL;
    double *numbers = NULL;
    Spikes spikes = {0};
    Plateau plateau = {0};
    if (values == NULL) goto done;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(values);
    if (PySequence_Fast_GET_SIZE(steps) < count) count = PySequence_Fast_GET_SIZE(steps); /* zip() */
    step_numbers = PyMem_Calloc(count + 1, sizeof(long long));
    numbers = PyMem_Calloc(count + 1, sizeof(double));
    if (step_numbers == NULL || numbers == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *step = PySequence_Fast_GET_ITEM(steps, i);
        step_numbers[i] = step == Py_None ? 0 : PyLong_AsLongLong(step);
        numbers[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(values, i));
        if (PyErr_Occurred()) goto done;
    }
    int has_spikes = spike_detector != Py_None, has_plateau = tracker != Py_None;
    if ((has_spikes && read_spikes(spike_detector, &spikes) < 0) || (has_plateau && read_plateau(tracker, &plateau, count) < 0)) {
        goto done;
    }
    Py_ssize_t nonfinite = 0, spiked = 0, last_nonfinite = -1, last_spike = -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        int has_step = PySequence_Fast_GET_ITEM(steps, i) != Py_None;
        if (!isfinite(numbers[i])) {
            nonfinite++;
            if (has_step) last_nonfinite = i;
            continue;
        }
        if (!has_spikes) {
            PyErr_SetString(PyExc_ValueError, "a finite value needs a spike detector");
            goto done;
        }
        if (observe_spike(&spikes, numbers[i])) {
            spiked++;
            if (has_step) last_spike = i;
        }
        if (has_plateau && spikes.excursion == 0) observe_plateau(&plateau, has_step, step_numbers[i], numbers[i]);
    }
    if ((has_spikes && write_spikes(spike_detector, &spikes) < 0) || (has_plateau && write_plateau(tracker, &plateau) < 0)) {
        goto done;
    }
    result = Py_BuildValue("nOnO", nonfinite, last_nonfinite < 0 ? Py_None : PySequence_Fast_GET_ITEM(steps, last_nonfinite),
                           spiked, last_spike < 0 ? Py_None : PySequence_Fast_GET_ITEM(steps, last_spike));
done:
    PyMem_Free(step_numbers);
    PyMem_Free(numbers);
    PyMem_Free(plateau.history_steps);
    PyMem_Free(plateau.history_smoothed);
    Py_XDECREF(steps);
    Py_XDECREF(values);
    return result;
}

static PyMethodDef methods[] = {
    {"check_series", (PyCFunction)(void (*)(void))check_series, METH_FASTCALL, check_series_doc},
    {NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "exporter.state._speedups",
    .m_doc = "Native twin of the detector loop (see state/detectors.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModule_Create(&speedups_module);
}
