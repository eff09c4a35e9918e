/* An array('d') read through its buffer: the step kernel hands a series' values over as one (step_fields.c's
 * take), and the kernels that read values (detectors.c, step_fields.c's rows) take its doubles without a float
 * object each. Included by both: each kernel is one file, built alone. */
#ifndef TRAINLOG_DOUBLES_H
#define TRAINLOG_DOUBLES_H

#include <string.h>

/* 1 and ``view`` held (the caller releases it) when ``given`` is a contiguous buffer of doubles; 0 otherwise (a
 * strided view, bytes, any other sequence: the caller reads it item by item), with nothing held or raised. */
static int
doubles_view(PyObject *given, Py_buffer *view)
{
    if (!PyObject_CheckBuffer(given) || PyBytes_Check(given) || PyByteArray_Check(given)) return 0;
    if (PyObject_GetBuffer(given, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        return 0;
    }
    if (view->format != NULL && strcmp(view->format, "d") == 0 && view->itemsize == (Py_ssize_t)sizeof(double)) {
        return 1;
    }
    PyBuffer_Release(view);
    return 0;
}

#endif
