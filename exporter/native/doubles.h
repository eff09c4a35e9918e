/* An array read through its buffer: the step kernel hands a series' values over as an array('d') (step_fields.c's
 * take), and the kernels that read values (detectors.c, step_fields.c's rows) take its doubles without a float
 * object each; StepReader.read takes line starts as an array of int64 alike. Included by both: each kernel is one
 * file, built alone. */
#ifndef TRAINLOG_DOUBLES_H
#define TRAINLOG_DOUBLES_H

#include <string.h>

/* 1 and ``view`` held (the caller releases it) when ``given`` is a contiguous buffer of ``itemsize``-byte items whose
 * format is one of the bytes of ``formats``; 0 otherwise (a strided view, bytes, any other sequence: the caller reads
 * it item by item, or refuses it), with nothing held or raised. */
static int
typed_view(PyObject *given, Py_buffer *view, const char *formats, Py_ssize_t itemsize)
{
    if (!PyObject_CheckBuffer(given) || PyBytes_Check(given) || PyByteArray_Check(given)) return 0;
    if (PyObject_GetBuffer(given, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        return 0;
    }
    const char *format = view->format;
    if (format != NULL && format[0] != '\0' && format[1] == '\0' && strchr(formats, format[0]) != NULL
        && view->itemsize == itemsize) {
        return 1;
    }
    PyBuffer_Release(view);
    return 0;
}

/* typed_view of an array('d'). */
static int
doubles_view(PyObject *given, Py_buffer *view)
{
    return typed_view(given, view, "d", (Py_ssize_t)sizeof(double));
}

#endif
