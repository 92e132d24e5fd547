/* The flight record's note in C (planaria.comm.flight): the same words the Python note writes.
 *
 * Why C: between two collectives of a kernel, the kernel's data pushes the interpreter's code and
 * objects out of the CPU's caches, and the Python note (a frame for the call, the frame object
 * of the caller made for sys._getframe, attribute look-ups, five memoryview stores) then costs
 * several microseconds instead of a few hundred nanoseconds. This one reads the caller's code
 * and instruction offset from the interpreter's frame without making a frame object, finds the
 * code's index in the slot itself when the slot's last note came from the same code (the slot's
 * word CODE_PTR keeps that code's address; the Python reader ignores it), and writes five words:
 * it touches a few cache lines where the Python note touches dozens. The size of a numpy array
 * is read from the array's own fields (numpy's headers, at build time).
 *
 * It reads CPython's internal frame layout, so it is built only for the versions whose layout it
 * knows (3.11, 3.12); elsewhere the build fails and the Python note stays.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030D0000
#error "the C note knows the frame layout of CPython 3.11 and 3.12 only"
#endif
#define Py_BUILD_CORE 1
#include "internal/pycore_frame.h"
#undef Py_BUILD_CORE

#define NPY_NO_DEPRECATED_API NPY_2_0_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL planaria_flightnote_ARRAY_API
#include <numpy/arrayobject.h>

#include <stdint.h>

#define CACHE 256                       /* code objects remembered (open addressing), > CODES */
#define WORDS 8                         /* 64-bit words per slot (flight.WORDS) */
#define CODE_PTR 5                      /* the slot's word that keeps the address of its last code object */

static Py_buffer view;                  /* the record's mapped file, while attached */
static int attached = 0;
static PyObject *new_code = NULL;       /* Python: code object -> its index in the record's table
                                           (entered there when new) */
static PyObject *size_of = NULL;        /* Python: size(buf) or size(alt) for buffers without nbytes */
static PyObject *s_nbytes;
static PyCodeObject *cache_code[CACHE];
static int64_t cache_k[CACHE];

static int64_t ask_index(PyCodeObject *code)
{
    /* the Python side's index of ``code`` (entered in the record's table when new); -1 on error */
    PyObject *r = PyObject_CallOneArg(new_code, (PyObject *)code);
    if (r == NULL)
        return -1;
    int64_t k = PyLong_AsLongLong(r);
    Py_DECREF(r);
    return (k == -1 && PyErr_Occurred()) ? -1 : k;
}

static int64_t code_index(PyCodeObject *code)
{
    size_t h = ((uintptr_t)code >> 4) % CACHE;
    for (int probe = 0; probe < CACHE; probe++) {
        size_t j = (h + probe) % CACHE;
        if (cache_code[j] == code)
            return cache_k[j];
        if (cache_code[j] == NULL) {
            int64_t k = ask_index(code);
            if (k >= 0) {
                cache_code[j] = code;   /* the Python side keeps a reference: the address stays its code's */
                cache_k[j] = k;
            }
            return k;
        }
    }
    return ask_index(code);             /* the cache is full */
}

static int64_t buffer_bytes(PyObject *buf, PyObject *alt, int *err)
{
    if (PyArray_Check(buf)) {
        /* read from the array itself, not through its ``nbytes`` attribute: numpy's attribute code
           is out of the caches between two collectives, the array just made or used is not */
        PyArrayObject *a = (PyArrayObject *)buf;
        int64_t n = (int64_t)PyArray_ITEMSIZE(a);
        npy_intp *dims = PyArray_DIMS(a);
        for (int d = 0; d < PyArray_NDIM(a); d++)
            n *= (int64_t)dims[d];
        return n;
    }
    PyObject *v = PyObject_GetAttr(buf, s_nbytes);
    if (v == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
            *err = 1;
            return 0;
        }
        PyErr_Clear();
        v = PyObject_CallFunctionObjArgs(size_of, buf, alt, NULL);
        if (v == NULL) {
            *err = 1;
            return 0;
        }
    }
    int64_t n = PyLong_Check(v) ? PyLong_AsLongLong(v) : 0;
    Py_DECREF(v);
    if (n == -1 && PyErr_Occurred())
        *err = 1;
    return n;
}

static int64_t as_int(PyObject *v, int *err)
{
    int64_t x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred())
        *err = 1;
    return x;
}

/* note(slot, seq, op, buf, alt=None): as planaria.comm.flight._py_note, called from a
 * communicator's method as note(self._fl, self._ml_seq, OP, buf[, alt]) */
static PyObject *note(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs < 4 || nargs > 5) {
        PyErr_SetString(PyExc_TypeError, "note(slot, seq, op, buf, alt=None)");
        return NULL;
    }
    if (!attached)
        Py_RETURN_NONE;
    int err = 0;
    int64_t i = as_int(args[0], &err);
    if (err)
        return NULL;
    if (i <= 0 || (i + WORDS) * 8 > view.len)
        Py_RETURN_NONE;
    int64_t seq = as_int(args[1], &err), op = as_int(args[2], &err);
    if (err)
        return NULL;
    int64_t *w = (int64_t *)view.buf + i;
    /* the caller of the communicator's method: the frame before the method's own (a C function
       pushes none), incomplete frames skipped as sys._getframe skips them */
    PyThreadState *ts = PyThreadState_Get();
    _PyInterpreterFrame *f = ts->cframe->current_frame;
    if (f != NULL)
        f = f->previous;
    while (f != NULL && _PyFrame_IsIncomplete(f))
        f = f->previous;
    int64_t k = 0, lasti = 0;
    if (f != NULL) {
        int64_t code = (int64_t)(uintptr_t)f->f_code;
        if (w[CODE_PTR] == code) {
            k = w[3];                   /* the same code as this slot's last note: its index is there */
        } else {
            k = code_index(f->f_code);
            if (k < 0)
                return NULL;
        }
        w[CODE_PTR] = code;
        int at = _PyInterpreterFrame_LASTI(f);
        lasti = at < 0 ? -1 : (int64_t)at * (int64_t)sizeof(_Py_CODEUNIT);
    }
    int64_t n = buffer_bytes(args[3], nargs > 4 ? args[4] : Py_None, &err);
    if (err)
        return NULL;
    w[1] = op;
    w[2] = n;
    w[3] = k;
    w[4] = lasti;
    __atomic_store_n(&w[0], seq, __ATOMIC_RELEASE);   /* the number last: a slot is whole once it shows */
    Py_RETURN_NONE;
}

/* attach(mapped, new_code, size_of): record into ``mapped`` (a writable buffer) from now on */
static PyObject *attach(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *mapped, *nc, *so;
    if (!PyArg_ParseTuple(args, "OOO", &mapped, &nc, &so))
        return NULL;
    if (attached) {
        PyBuffer_Release(&view);
        attached = 0;
    }
    if (PyObject_GetBuffer(mapped, &view, PyBUF_WRITABLE | PyBUF_SIMPLE) < 0)
        return NULL;
    Py_XSETREF(new_code, Py_NewRef(nc));
    Py_XSETREF(size_of, Py_NewRef(so));
    memset(cache_code, 0, sizeof cache_code);
    attached = 1;
    Py_RETURN_NONE;
}

/* detach(): stop recording and let go of the buffer (the mapping can then be closed) */
static PyObject *detach(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    if (attached) {
        PyBuffer_Release(&view);
        attached = 0;
    }
    memset(cache_code, 0, sizeof cache_code);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"note", (PyCFunction)(void (*)(void))note, METH_FASTCALL, "Write a collective's note into the record."},
    {"attach", attach, METH_VARARGS, "Record into a mapped buffer from now on."},
    {"detach", detach, METH_NOARGS, "Stop recording and release the buffer."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_flightnote", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__flightnote(void)
{
    if (_import_array() < 0)            /* numpy's C API (an ImportError if it does not match), quietly */
        return NULL;
    s_nbytes = PyUnicode_InternFromString("nbytes");
    if (s_nbytes == NULL)
        return NULL;
    return PyModule_Create(&module);
}
