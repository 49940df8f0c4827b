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
 *
 *   decode_produce(buf, version) -> (RequestHeader, ProduceRequest) | None
 *     A whole Produce request frame of v3-v12 (header and body; bytes after the body are
 *     ignored, as framing.decode_request does), built as the generated decoders build it
 *     (`object.__new__` and one store per slot), or None for anything but the plain case
 *     — a tagged field, a null array, a length past the end, a varint the Python reader
 *     would refuse, bad UTF-8 — which framing.py then decodes with the generated code and
 *     answers precisely. `install_produce(...)` gives it the generated classes once.
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


/* --- Produce requests, whole ----------------------------------------------------------- */

static PyObject *c_header, *c_request, *c_topic, *c_partition, *zero_uuid;
static PyObject *n_api_key, *n_api_version, *n_correlation_id, *n_client_id, *n_tags,
    *n_transactional_id, *n_acks, *n_timeout_ms, *n_topic_data, *n_name, *n_topic_id,
    *n_partition_data, *n_index, *n_records;

typedef struct {
    PyObject *buf;
    const uint8_t *d;
    Py_ssize_t len, pos;
} Reader;

/* Each reader: 1 read, 0 not the plain case (the caller answers None), -1 an error set. */
static int r_i16(Reader *r, int *out) {
    if (r->len - r->pos < 2) return 0;
    *out = (int16_t)(((uint16_t)r->d[r->pos] << 8) | r->d[r->pos + 1]);
    r->pos += 2;
    return 1;
}

static int r_i32(Reader *r, int64_t *out) {
    if (r->len - r->pos < 4) return 0;
    const uint8_t *p = r->d + r->pos;
    *out = (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
                     p[3]);
    r->pos += 4;
    return 1;
}

/* A compact length: an unsigned 32-bit varint minus one. */
static int r_compact(Reader *r, int64_t *out) {
    uint64_t value = 0;
    for (int i = 0; i < 5; i++) {
        if (r->pos >= r->len) return 0;
        uint8_t byte = r->d[r->pos++];
        value |= (uint64_t)(byte & 0x7F) << (7 * i);
        if (!(byte & 0x80)) {
            if (value > 0xFFFFFFFFu) return 0;
            *out = (int64_t)value - 1;
            return 1;
        }
    }
    return 0;
}

static int r_length(Reader *r, int compact, int wide, int64_t *n) {
    if (compact) return r_compact(r, n);
    if (wide) return r_i32(r, n);
    int v;
    if (!r_i16(r, &v)) return 0;
    *n = v;
    return 1;
}

static int r_string(Reader *r, int compact, int nullable, PyObject **out) {
    int64_t n;
    if (!r_length(r, compact, 0, &n)) return 0;
    if (n < 0) {
        if (!nullable || n != -1) return 0;
        *out = Py_NewRef(Py_None);
        return 1;
    }
    if (n > r->len - r->pos) return 0;
    *out = PyUnicode_DecodeUTF8((const char *)r->d + r->pos, (Py_ssize_t)n, NULL);
    if (*out == NULL) {
        PyErr_Clear();
        return 0;
    }
    r->pos += (Py_ssize_t)n;
    return 1;
}

static int r_records(Reader *r, int compact, PyObject **out) {
    int64_t n;
    if (!r_length(r, compact, 1, &n) || n < -1 || n > r->len - r->pos) return 0;
    if (n == -1) {
        *out = Py_NewRef(Py_None);
        return 1;
    }
    *out = PySequence_GetSlice(r->buf, r->pos, r->pos + (Py_ssize_t)n);
    if (*out == NULL) return -1;
    r->pos += (Py_ssize_t)n;
    return 1;
}

/* A non-null array's element count, checked against the bytes left as the Python reader
 * checks it. */
static int r_count(Reader *r, int compact, Py_ssize_t *out) {
    int64_t n;
    if (!r_length(r, compact, 1, &n) || n < 0 || n > r->len - r->pos) return 0;
    *out = (Py_ssize_t)n;
    return 1;
}

/* The empty tagged-field section (one zero byte) of flexible versions; any other: 0. */
static int r_no_tags(Reader *r) {
    if (r->pos < r->len && r->d[r->pos] == 0) {
        r->pos++;
        return 1;
    }
    return 0;
}

/* A new instance of a generated class without __init__ (as `object.__new__(cls)`), its
 * slots stored from `names`/`values` (stolen references; NULL values: not plain). */
static PyObject *build(PyObject *cls, PyObject **names, PyObject **values, int count) {
    PyObject *o = NULL;
    for (int i = 0; i < count; i++) {
        if (values[i] == NULL) goto done;
    }
    o = ((PyTypeObject *)cls)->tp_alloc((PyTypeObject *)cls, 0);
    if (o == NULL) goto done;
    for (int i = 0; i < count; i++) {
        if (PyObject_SetAttr(o, names[i], values[i]) != 0) {
            Py_CLEAR(o);
            goto done;
        }
    }
done:
    for (int i = 0; i < count; i++) Py_XDECREF(values[i]);
    return o;
}

#define READ(call)              \
    do {                        \
        int ok_ = (call);       \
        if (ok_ <= 0) {         \
            status = ok_;       \
            goto fail;          \
        }                       \
    } while (0)

/* One partition's data; *status 0 (not plain) or -1 (error) when NULL is returned. */
static PyObject *r_partition(Reader *r, int flexible, int *status_out) {
    int status = 1;
    int64_t index;
    PyObject *records = NULL;
    READ(r_i32(r, &index));
    READ(r_records(r, flexible, &records));
    if (flexible) READ(r_no_tags(r));
    {
        PyObject *names[] = {n_index, n_records, n_tags};
        PyObject *values[] = {PyLong_FromLongLong(index), records, Py_NewRef(Py_None)};
        records = NULL;
        PyObject *o = build(c_partition, names, values, 3);
        if (o == NULL) *status_out = -1;
        return o;
    }
fail:
    Py_XDECREF(records);
    *status_out = status;
    return NULL;
}

static PyObject *r_topic(Reader *r, int flexible, int *status_out) {
    int status = 1;
    PyObject *name = NULL, *partitions = NULL;
    Py_ssize_t count;
    READ(r_string(r, flexible, 0, &name));
    READ(r_count(r, flexible, &count));
    partitions = PyList_New(0);
    if (partitions == NULL) {
        status = -1;
        goto fail;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *p = r_partition(r, flexible, &status);
        if (p == NULL) goto fail;
        int appended = PyList_Append(partitions, p);
        Py_DECREF(p);
        if (appended != 0) {
            status = -1;
            goto fail;
        }
    }
    if (flexible) READ(r_no_tags(r));
    {
        PyObject *names[] = {n_name, n_topic_id, n_partition_data, n_tags};
        PyObject *values[] = {name, Py_NewRef(zero_uuid), partitions, Py_NewRef(Py_None)};
        PyObject *o = build(c_topic, names, values, 4);
        if (o == NULL) *status_out = -1;
        return o;
    }
fail:
    Py_XDECREF(name);
    Py_XDECREF(partitions);
    *status_out = status;
    return NULL;
}

static PyObject *p_decode_produce(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (c_header == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "riverlog.protocol._prim: install_produce() not called");
        return NULL;
    }
    if (nargs != 2 || !PyMemoryView_Check(args[0]) || !PyLong_CheckExact(args[1])) {
        Py_RETURN_NONE;
    }
    long version = PyLong_AsLong(args[1]);
    if (version < 3 || version > 12) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    int flexible = version >= 9;
    Py_buffer view;
    Py_ssize_t pos = 0;
    int held = 0;
    const uint8_t *d;
    Py_ssize_t len;
    PyObject *zero = PyLong_FromLong(0);
    if (zero == NULL) return NULL;
    int opened = open_buffer(args[0], zero, &view, &held, &d, &len, &pos);
    Py_DECREF(zero);
    if (!opened) {
        if (held) PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    Reader reader = {args[0], d, len, 0};
    Reader *r = &reader;
    int status = 1;
    PyObject *client_id = NULL, *txn = NULL, *topics = NULL, *header = NULL, *result = NULL;
    int key, hversion, acks;
    int64_t correlation, timeout;
    Py_ssize_t count;
    READ(r_i16(r, &key));
    READ(r_i16(r, &hversion));
    READ(r_i32(r, &correlation));
    READ(r_string(r, 0, 1, &client_id));
    if (flexible) READ(r_no_tags(r));
    READ(r_string(r, flexible, 1, &txn));
    READ(r_i16(r, &acks));
    READ(r_i32(r, &timeout));
    READ(r_count(r, flexible, &count));
    topics = PyList_New(0);
    if (topics == NULL) {
        status = -1;
        goto fail;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *t = r_topic(r, flexible, &status);
        if (t == NULL) goto fail;
        int appended = PyList_Append(topics, t);
        Py_DECREF(t);
        if (appended != 0) {
            status = -1;
            goto fail;
        }
    }
    if (flexible) READ(r_no_tags(r));
    {
        PyObject *names[] = {n_api_key, n_api_version, n_correlation_id, n_client_id, n_tags};
        PyObject *values[] = {PyLong_FromLong(key), PyLong_FromLong(hversion),
                              PyLong_FromLongLong(correlation), client_id, Py_NewRef(Py_None)};
        client_id = NULL;
        header = build(c_header, names, values, 5);
        if (header == NULL) {
            status = -1;
            goto fail;
        }
    }
    {
        PyObject *names[] = {n_transactional_id, n_acks, n_timeout_ms, n_topic_data, n_tags};
        PyObject *values[] = {txn, PyLong_FromLong(acks), PyLong_FromLongLong(timeout), topics,
                              Py_NewRef(Py_None)};
        txn = topics = NULL;
        PyObject *body = build(c_request, names, values, 5);
        if (body == NULL) {
            status = -1;
            goto fail;
        }
        result = PyTuple_Pack(2, header, body);
        Py_DECREF(body);
        if (result == NULL) status = -1;
    }
fail:
    if (held) PyBuffer_Release(&view);
    Py_XDECREF(client_id);
    Py_XDECREF(txn);
    Py_XDECREF(topics);
    Py_XDECREF(header);
    if (status < 0) {
        Py_XDECREF(result);
        return NULL;
    }
    if (result == NULL) Py_RETURN_NONE;
    return result;
}

static PyObject *p_install_produce(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "install_produce(RequestHeader, ProduceRequest, TopicProduceData, "
                        "PartitionProduceData, ZERO_UUID)");
        return NULL;
    }
    for (int i = 0; i < 4; i++) {
        if (!PyType_Check(args[i])) {
            PyErr_SetString(PyExc_TypeError, "install_produce() takes the generated classes");
            return NULL;
        }
    }
    Py_XSETREF(c_header, Py_NewRef(args[0]));
    Py_XSETREF(c_request, Py_NewRef(args[1]));
    Py_XSETREF(c_topic, Py_NewRef(args[2]));
    Py_XSETREF(c_partition, Py_NewRef(args[3]));
    Py_XSETREF(zero_uuid, Py_NewRef(args[4]));
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
    {"decode_produce", (PyCFunction)(void (*)(void))p_decode_produce, METH_FASTCALL,
     "A whole Produce request frame (v3-v12), or None: not the plain case."},
    {"install_produce", (PyCFunction)(void (*)(void))p_install_produce, METH_FASTCALL,
     "The generated classes decode_produce builds."},
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
    struct {
        PyObject **slot;
        const char *text;
    } names[] = {{&n_api_key, "request_api_key"},
                 {&n_api_version, "request_api_version"},
                 {&n_correlation_id, "correlation_id"},
                 {&n_client_id, "client_id"},
                 {&n_tags, "unknown_tagged_fields"},
                 {&n_transactional_id, "transactional_id"},
                 {&n_acks, "acks"},
                 {&n_timeout_ms, "timeout_ms"},
                 {&n_topic_data, "topic_data"},
                 {&n_name, "name"},
                 {&n_topic_id, "topic_id"},
                 {&n_partition_data, "partition_data"},
                 {&n_index, "index"},
                 {&n_records, "records"}};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (*names[i].slot == NULL) {
            *names[i].slot = PyUnicode_InternFromString(names[i].text);
            if (*names[i].slot == NULL) return NULL;
        }
    }
    return PyModule_Create(&module);
}
