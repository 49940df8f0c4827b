/* riverlog.protocol._prim: compiled fast paths of the protocol's hottest primitive readers
 * and writers.
 *
 * The accelerated twin of part of riverlog/protocol/primitives.py (that module owns the
 * semantics; read its docstring). Every request decodes a few strings, array lengths and a
 * record set, and every Python-level reader is 2-4 interpreter calls (`_compact_length`,
 * `_take`, `_utf8`): on a one-record Produce request they were ~15 calls of ~280 (issue 29).
 *
 * Invariant: each function here answers only the common, well-formed case itself — a buffer
 * of bytes (a memoryview of format 'B', or bytes), `pos` in range, a one-byte compact
 * length or a classic length, every declared byte present, valid UTF-8, a list or tuple for
 * an array — and hands every other case to the pure-Python function it accelerates,
 * unchanged. So its errors (and their messages) are the Python ones by construction, and a
 * value it returns is the value the Python function returns for the same input; the tests
 * compare both on arbitrary bytes. `install(...)` gives the module those Python functions
 * once, at import of primitives.py.
 *
 *   read_string / read_nullable_string / read_compact_string /
 *   read_compact_nullable_string (buf, pos) -> (str | None, pos)
 *   read_array_length / read_compact_array_length (buf, pos) -> (int, pos)
 *   read_records / read_compact_records (buf, pos) -> (memoryview slice | None, pos)
 *   write_compact_string / write_compact_nullable_string (value) -> bytes
 *   write_compact_array_length (value, nullable) -> bytes
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum {
    F_STRING,
    F_NULLABLE_STRING,
    F_COMPACT_STRING,
    F_COMPACT_NULLABLE_STRING,
    F_ARRAY_LENGTH,
    F_COMPACT_ARRAY_LENGTH,
    F_RECORDS,
    F_COMPACT_RECORDS,
    F_WRITE_COMPACT_STRING,
    F_WRITE_COMPACT_ARRAY_LENGTH,
    F_WRITE_COMPACT_NULLABLE_STRING,
    F_COUNT
};

static PyObject *fallbacks[F_COUNT];
static PyObject *one_byte[0x80]; /* bytes((n,)) for n < 0x80 */

static PyObject *fallback(int which, PyObject *const *args, Py_ssize_t nargs) {
    if (fallbacks[which] == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "riverlog.protocol._prim: install() not called");
        return NULL;
    }
    return PyObject_Vectorcall(fallbacks[which], args, nargs, NULL);
}

/* The bytes of `buf` (held in `view`, released by the caller when *held) and `pos`, or 0
 * when this is not the plain case (the Python function then answers). */
static int open_buffer(PyObject *buf, PyObject *pos_obj, Py_buffer *view, int *held,
                       const uint8_t **data, Py_ssize_t *len, Py_ssize_t *pos) {
    *held = 0;
    if (!PyLong_CheckExact(pos_obj)) return 0;
    Py_ssize_t p = PyLong_AsSsize_t(pos_obj);
    if (p == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (p < 0) return 0;
    if (PyBytes_CheckExact(buf)) {
        *data = (const uint8_t *)PyBytes_AS_STRING(buf);
        *len = PyBytes_GET_SIZE(buf);
    } else if (PyMemoryView_Check(buf)) {
        if (PyObject_GetBuffer(buf, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) != 0) {
            PyErr_Clear(); /* released, or not contiguous: Python's answer */
            return 0;
        }
        *held = 1;
        if (view->itemsize != 1 || view->ndim > 1 ||
            (view->format != NULL && strcmp(view->format, "B") != 0)) {
            return 0;
        }
        *data = (const uint8_t *)view->buf;
        *len = view->len;
    } else {
        return 0;
    }
    *pos = p;
    return 1;
}

static PyObject *pair(PyObject *value, Py_ssize_t pos) {
    if (value == NULL) return NULL;
    PyObject *p = PyLong_FromSsize_t(pos);
    if (p == NULL) {
        Py_DECREF(value);
        return NULL;
    }
    PyObject *t = PyTuple_New(2);
    if (t == NULL) {
        Py_DECREF(value);
        Py_DECREF(p);
        return NULL;
    }
    PyTuple_SET_ITEM(t, 0, value);
    PyTuple_SET_ITEM(t, 1, p);
    return t;
}

/* The declared length at pos: classic (int16 / int32, big-endian) or compact (a one-byte
 * unsigned varint of length + 1). 0 when not the plain case. */
static int read_length(const uint8_t *d, Py_ssize_t len, Py_ssize_t *pos, int kind,
                       int64_t *n) {
    Py_ssize_t p = *pos;
    if (kind == 2) {
        if (p >= len || d[p] >= 0x80) return 0;
        *n = (int64_t)d[p] - 1;
        *pos = p + 1;
    } else if (kind == 1) {
        if (len - p < 2) return 0;
        *n = (int16_t)(((uint16_t)d[p] << 8) | d[p + 1]);
        *pos = p + 2;
    } else {
        if (len - p < 4) return 0;
        *n = (int32_t)(((uint32_t)d[p] << 24) | ((uint32_t)d[p + 1] << 16) |
                       ((uint32_t)d[p + 2] << 8) | d[p + 3]);
        *pos = p + 4;
    }
    return 1;
}

/* Strings: kind 1 classic (int16), 2 compact; nullable or not. */
static PyObject *read_str(int which, int kind, int nullable, PyObject *const *args,
                          Py_ssize_t nargs) {
    Py_buffer view;
    int held = 0;
    const uint8_t *d;
    Py_ssize_t len, pos;
    int64_t n;
    PyObject *result = NULL;
    if (nargs != 2 || !open_buffer(args[0], args[1], &view, &held, &d, &len, &pos) ||
        !read_length(d, len, &pos, kind, &n)) {
        goto python;
    }
    if (n < 0) {
        if (!nullable || n != -1) goto python; /* Python raises the right error */
        result = pair(Py_NewRef(Py_None), pos);
        goto done;
    }
    if (n > len - pos) goto python;
    PyObject *s = PyUnicode_DecodeUTF8((const char *)d + pos, (Py_ssize_t)n, NULL);
    if (s == NULL) {
        PyErr_Clear();
        goto python;
    }
    result = pair(s, pos + (Py_ssize_t)n);
    goto done;
python:
    if (held) PyBuffer_Release(&view);
    return fallback(which, args, nargs);
done:
    if (held) PyBuffer_Release(&view);
    return result;
}

/* Array lengths: -1 (null) or a count that fits the bytes left; kind 3 classic, 2 compact. */
static PyObject *read_array(int which, int kind, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer view;
    int held = 0;
    const uint8_t *d;
    Py_ssize_t len, pos;
    int64_t n;
    if (nargs != 2 || !open_buffer(args[0], args[1], &view, &held, &d, &len, &pos) ||
        !read_length(d, len, &pos, kind, &n) || n < -1 || n > len - pos) {
        if (held) PyBuffer_Release(&view);
        return fallback(which, args, nargs);
    }
    if (held) PyBuffer_Release(&view);
    return pair(PyLong_FromLongLong(n), pos);
}

/* Record sets: a slice of `buf` (a memoryview: the slice copies nothing) or None. */
static PyObject *read_recs(int which, int kind, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer view;
    int held = 0;
    const uint8_t *d;
    Py_ssize_t len, pos;
    int64_t n;
    if (nargs != 2 || !PyMemoryView_Check(args[0]) ||
        !open_buffer(args[0], args[1], &view, &held, &d, &len, &pos) ||
        !read_length(d, len, &pos, kind, &n) || n < -1 || n > len - pos) {
        if (held) PyBuffer_Release(&view);
        return fallback(which, args, nargs);
    }
    PyBuffer_Release(&view);
    if (n == -1) return pair(Py_NewRef(Py_None), pos);
    PyObject *slice = PySequence_GetSlice(args[0], pos, pos + (Py_ssize_t)n);
    return pair(slice, pos + (Py_ssize_t)n);
}

static PyObject *p_read_string(PyObject *m, PyObject *const *a, Py_ssize_t n) {
    return read_str(F_STRING, 1, 0, a, n);
}
static PyObject *p_read_nullable_string(PyObject *m, PyObject *const *a, Py_ssize_t n) {
    return read_str(F_NULLABLE_STRING, 1, 1, a, n);
}
static PyObject *p_read_compact_string(PyObject *m, PyObject *const *a, Py_ssize_t n) {
    return read_str(F_COMPACT_STRING, 2, 0, a, n);
}
static PyObject *p_read_compact_nullable_string(PyObject *m, PyObject *const *a,
                                                Py_ssize_t n) {
    return read_str(F_COMPACT_NULLABLE_STRING, 2, 1, a, n);
}
static PyObject *p_read_array_length(PyObject *m, PyObject *const *a, Py_ssize_t n) {
    return read_array(F_ARRAY_LENGTH, 3, a, n);
}
static PyObject *p_read_compact_array_length(PyObject *m, PyObject *const *a, Py_ssize_t n) {
    return read_array(F_COMPACT_ARRAY_LENGTH, 2, a, n);
}
static PyObject *p_read_records(PyObject *m, PyObject *const *a, Py_ssize_t n) {
    return read_recs(F_RECORDS, 3, a, n);
}
static PyObject *p_read_compact_records(PyObject *m, PyObject *const *a, Py_ssize_t n) {
    return read_recs(F_COMPACT_RECORDS, 2, a, n);
}

static PyObject *p_write_compact_string(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs == 1 && PyUnicode_CheckExact(args[0])) {
        Py_ssize_t size;
        const char *raw = PyUnicode_AsUTF8AndSize(args[0], &size);
        if (raw == NULL) {
            PyErr_Clear(); /* lone surrogates: Python's encode raises */
        } else if (size + 1 < 0x80) {
            PyObject *out = PyBytes_FromStringAndSize(NULL, size + 1);
            if (out == NULL) return NULL;
            char *p = PyBytes_AS_STRING(out);
            p[0] = (char)(size + 1);
            memcpy(p + 1, raw, (size_t)size);
            return out;
        }
    }
    return fallback(F_WRITE_COMPACT_STRING, args, nargs);
}

static PyObject *p_write_compact_nullable_string(PyObject *m, PyObject *const *args,
                                                  Py_ssize_t nargs) {
    if (nargs == 1 && args[0] == Py_None) return Py_NewRef(one_byte[0]);
    if (nargs == 1 && PyUnicode_CheckExact(args[0])) {
        return p_write_compact_string(m, args, nargs); /* same bytes, same fallback */
    }
    return fallback(F_WRITE_COMPACT_NULLABLE_STRING, args, nargs);
}

static PyObject *p_write_compact_array_length(PyObject *m, PyObject *const *args,
                                              Py_ssize_t nargs) {
    if (nargs == 2 && (PyList_CheckExact(args[0]) || PyTuple_CheckExact(args[0]))) {
        Py_ssize_t n = Py_SIZE(args[0]) + 1;
        if (n < 0x80) return Py_NewRef(one_byte[n]);
    }
    return fallback(F_WRITE_COMPACT_ARRAY_LENGTH, args, nargs);
}

static PyObject *p_install(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != F_COUNT) {
        PyErr_Format(PyExc_TypeError, "install() takes %d functions", F_COUNT);
        return NULL;
    }
    for (int i = 0; i < F_COUNT; i++) {
        if (!PyCallable_Check(args[i])) {
            PyErr_SetString(PyExc_TypeError, "install() takes functions");
            return NULL;
        }
    }
    for (int i = 0; i < F_COUNT; i++) Py_XSETREF(fallbacks[i], Py_NewRef(args[i]));
    Py_RETURN_NONE;
}


static PyMethodDef methods[] = {
    {"install", (PyCFunction)(void (*)(void))p_install, METH_FASTCALL,
     "The pure-Python functions, in the order of primitives.py's ACCELERATED."},
    {"read_string", (PyCFunction)(void (*)(void))p_read_string, METH_FASTCALL, NULL},
    {"read_nullable_string", (PyCFunction)(void (*)(void))p_read_nullable_string, METH_FASTCALL,
     NULL},
    {"read_compact_string", (PyCFunction)(void (*)(void))p_read_compact_string, METH_FASTCALL,
     NULL},
    {"read_compact_nullable_string", (PyCFunction)(void (*)(void))p_read_compact_nullable_string,
     METH_FASTCALL, NULL},
    {"read_array_length", (PyCFunction)(void (*)(void))p_read_array_length, METH_FASTCALL, NULL},
    {"read_compact_array_length", (PyCFunction)(void (*)(void))p_read_compact_array_length,
     METH_FASTCALL, NULL},
    {"read_records", (PyCFunction)(void (*)(void))p_read_records, METH_FASTCALL, NULL},
    {"read_compact_records", (PyCFunction)(void (*)(void))p_read_compact_records, METH_FASTCALL,
     NULL},
    {"write_compact_string", (PyCFunction)(void (*)(void))p_write_compact_string, METH_FASTCALL,
     NULL},
    {"write_compact_array_length", (PyCFunction)(void (*)(void))p_write_compact_array_length,
     METH_FASTCALL, NULL},
    {"write_compact_nullable_string",
     (PyCFunction)(void (*)(void))p_write_compact_nullable_string, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_prim", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__prim(void) {
    for (int i = 0; i < 0x80; i++) {
        if (one_byte[i] == NULL) {
            char c = (char)i;
            one_byte[i] = PyBytes_FromStringAndSize(&c, 1);
            if (one_byte[i] == NULL) return NULL;
        }
    }
    return PyModule_Create(&module);
}
