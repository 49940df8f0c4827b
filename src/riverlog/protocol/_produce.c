/* riverlog.protocol._produce: Produce requests and answers of the plain shape, whole, in C.
 *
 * The accelerated twin of the generated Produce decoders and encoders
 * (riverlog/protocol/messages.py, from tools/generate_messages.py), used by
 * riverlog/protocol/framing.py (`FAST_PRODUCE`, `FAST_PRODUCE_ANSWER`). A one-record
 * acks=all request spent ~300 bytecodes and ~12 interpreter calls decoding and ~200 encoding
 * its answer (issue 29).
 *
 * Invariant: each function answers only the plain, well-formed case and returns None for
 * every other one, which the generated code then handles exactly as before — so errors are
 * the generated code's by construction, and what is returned is what the generated code
 * builds for the same input; the tests compare both on arbitrary, byte-changed and cut
 * requests and on arbitrary answers with fields of wrong types.
 *
 *   decode_produce(buf, version) -> Request | None
 *     A whole Produce request frame of v3-v12 (header and body; bytes after the body are
 *     ignored, as framing.decode_request does), built as the generated decoders build it
 *     (`object.__new__` and one store per slot), or None: a tagged field, a null array, a
 *     length past the end, a varint the Python reader would refuse, bad UTF-8, ...
 *     `install_produce(...)` gives it the generated classes once.
 *
 *   encode_produce_response(body, version, correlation_id) -> bytes | None
 *     The whole frame (size prefix, response header, body) of a ProduceResponse v3-v12 of
 *     the plain shape — exact ints in range, no record errors, no tagged fields (v10+: no
 *     current leader, no node endpoints to tell), under 4 KiB — byte for byte what framing.encode_response joins; None for anything else.
 *     `install_produce_response(...)` gives it the generated classes once.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* The bytes of a memoryview of unsigned bytes (held in `view`: the caller releases it),
 * or 0 when it is anything else (released, strided, another format). */
static int open_view(PyObject *buf, Py_buffer *view) {
    if (!PyMemoryView_Check(buf)) return 0;
    if (PyObject_GetBuffer(buf, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) != 0) {
        PyErr_Clear();
        return 0;
    }
    if (view->itemsize != 1 || view->ndim > 1 ||
        (view->format != NULL && strcmp(view->format, "B") != 0)) {
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

/* --- requests ------------------------------------------------------------------------- */

static PyObject *c_whole, *c_header, *c_request, *c_topic, *c_partition, *zero_uuid;
static PyObject *n_api_key, *n_api_version, *n_correlation_id, *n_client_id, *n_tags,
    *n_transactional_id, *n_acks, *n_timeout_ms, *n_topic_data, *n_name, *n_topic_id,
    *n_partition_data, *n_index, *n_records, *n_header, *n_body;

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
    if (!open_view(args[0], &view)) Py_RETURN_NONE;
    Reader reader = {args[0], (const uint8_t *)view.buf, view.len, 0};
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
        PyObject *whole_names[] = {n_header, n_body};
        PyObject *whole_values[] = {header, body};
        header = NULL;
        result = build(c_whole, whole_names, whole_values, 2);
        if (result == NULL) status = -1;
    }
fail:
    PyBuffer_Release(&view);
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
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "install_produce(Request, RequestHeader, ProduceRequest, "
                        "TopicProduceData, PartitionProduceData, ZERO_UUID)");
        return NULL;
    }
    for (int i = 0; i < 5; i++) {
        if (!PyType_Check(args[i])) {
            PyErr_SetString(PyExc_TypeError, "install_produce() takes the generated classes");
            return NULL;
        }
    }
    Py_XSETREF(c_whole, Py_NewRef(args[0]));
    Py_XSETREF(c_header, Py_NewRef(args[1]));
    Py_XSETREF(c_request, Py_NewRef(args[2]));
    Py_XSETREF(c_topic, Py_NewRef(args[3]));
    Py_XSETREF(c_partition, Py_NewRef(args[4]));
    Py_XSETREF(zero_uuid, Py_NewRef(args[5]));
    Py_RETURN_NONE;
}

/* --- answers ------------------------------------------------------------------------- */

static PyObject *c_response, *c_topic_response, *c_partition_response;
static PyObject *n_responses, *n_throttle_time_ms, *n_partition_responses, *n_error_code,
    *n_base_offset, *n_log_append_time_ms, *n_log_start_offset, *n_record_errors,
    *n_error_message, *n_current_leader, *n_leader_id, *n_leader_epoch, *n_node_endpoints;

#define ANSWER_MAX 4096

typedef struct {
    uint8_t d[ANSWER_MAX];
    Py_ssize_t n;
} Writer;

static int w_bytes(Writer *w, const void *p, Py_ssize_t n) {
    if (n > ANSWER_MAX - w->n) return 0;
    memcpy(w->d + w->n, p, (size_t)n);
    w->n += n;
    return 1;
}

static int w_int(Writer *w, int64_t v, int size) {
    if (size > ANSWER_MAX - w->n) return 0;
    for (int i = size - 1; i >= 0; i--) {
        w->d[w->n + i] = (uint8_t)(v & 0xFF);
        v >>= 8;
    }
    w->n += size;
    return 1;
}

static int w_uvarint(Writer *w, uint64_t v) {
    do {
        uint8_t byte = v & 0x7F;
        v >>= 7;
        if (v) byte |= 0x80;
        if (!w_bytes(w, &byte, 1)) return 0;
    } while (v);
    return 1;
}

/* An exact int attribute within [low, high] (what struct.pack takes), or 0. */
static int get_int(PyObject *o, PyObject *name, int64_t low, int64_t high, int64_t *out) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL) {
        PyErr_Clear();
        return 0;
    }
    int ok = 0;
    if (PyLong_CheckExact(v)) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (!overflow && !(x == -1 && PyErr_Occurred()) && x >= low && x <= high) {
            *out = x;
            ok = 1;
        }
        PyErr_Clear();
    }
    Py_DECREF(v);
    return ok;
}

/* A borrowed-then-released attribute that must be exactly of `type` (NULL: not plain). */
static PyObject *get_exact(PyObject *o, PyObject *name, PyTypeObject *type) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL) {
        PyErr_Clear();
        return NULL;
    }
    if (Py_TYPE(v) != type) {
        Py_DECREF(v);
        return NULL;
    }
    return v;
}

/* No unknown tagged fields (None or empty): the one-byte empty section. */
static int no_tagged(PyObject *o) {
    PyObject *v = PyObject_GetAttr(o, n_tags);
    if (v == NULL) {
        PyErr_Clear();
        return 0;
    }
    int empty = v == Py_None || (PyDict_CheckExact(v) && PyDict_GET_SIZE(v) == 0);
    Py_DECREF(v);
    return empty;
}

static int w_count(Writer *w, Py_ssize_t n, int flexible) {
    return flexible ? w_uvarint(w, (uint64_t)n + 1) : w_int(w, n, 4);
}

/* A string (non-null) or, when `nullable`, None. */
static int w_string(Writer *w, PyObject *v, int flexible, int nullable) {
    if (v == Py_None) {
        if (!nullable) return 0;
        return flexible ? w_uvarint(w, 0) : w_int(w, -1, 2);
    }
    if (!PyUnicode_CheckExact(v)) return 0;
    Py_ssize_t size;
    const char *raw = PyUnicode_AsUTF8AndSize(v, &size);
    if (raw == NULL) {
        PyErr_Clear();
        return 0;
    }
    if (flexible) {
        if (!w_uvarint(w, (uint64_t)size + 1)) return 0;
    } else {
        if (size > 0x7FFF || !w_int(w, size, 2)) return 0;
    }
    return w_bytes(w, raw, size);
}

static int w_partition(Writer *w, PyObject *p, long version) {
    int flexible = version >= 9;
    int64_t index, error, base, append_time, start;
    if (Py_TYPE(p) != (PyTypeObject *)c_partition_response ||
        !get_int(p, n_index, INT32_MIN, INT32_MAX, &index) ||
        !get_int(p, n_error_code, INT16_MIN, INT16_MAX, &error) ||
        !get_int(p, n_base_offset, INT64_MIN, INT64_MAX, &base) ||
        !get_int(p, n_log_append_time_ms, INT64_MIN, INT64_MAX, &append_time) ||
        !w_int(w, index, 4) || !w_int(w, error, 2) || !w_int(w, base, 8) ||
        !w_int(w, append_time, 8)) {
        return 0;
    }
    if (version >= 5) {
        if (!get_int(p, n_log_start_offset, INT64_MIN, INT64_MAX, &start) || !w_int(w, start, 8))
            return 0;
    }
    if (version >= 8) {
        PyObject *errors = get_exact(p, n_record_errors, &PyList_Type);
        if (errors == NULL) return 0;
        Py_ssize_t count = PyList_GET_SIZE(errors);
        Py_DECREF(errors);
        if (count != 0 || !w_count(w, 0, flexible)) return 0;
        PyObject *message = PyObject_GetAttr(p, n_error_message);
        if (message == NULL) {
            PyErr_Clear();
            return 0;
        }
        int ok = w_string(w, message, flexible, 1);
        Py_DECREF(message);
        if (!ok) return 0;
    }
    if (version >= 10) { /* current_leader (tag 0) only when not the default: not plain */
        PyObject *leader = PyObject_GetAttr(p, n_current_leader);
        if (leader == NULL) {
            PyErr_Clear();
            return 0;
        }
        int64_t id, epoch;
        int plain = get_int(leader, n_leader_id, -1, -1, &id) &&
                    get_int(leader, n_leader_epoch, -1, -1, &epoch) && no_tagged(leader);
        Py_DECREF(leader);
        if (!plain) return 0;
    }
    if (flexible && (!no_tagged(p) || !w_uvarint(w, 0))) return 0;
    return 1;
}

static int w_topic(Writer *w, PyObject *t, long version) {
    int flexible = version >= 9;
    if (Py_TYPE(t) != (PyTypeObject *)c_topic_response) return 0;
    PyObject *name = PyObject_GetAttr(t, n_name);
    if (name == NULL) {
        PyErr_Clear();
        return 0;
    }
    int ok = w_string(w, name, flexible, 0);
    Py_DECREF(name);
    if (!ok) return 0;
    PyObject *partitions = get_exact(t, n_partition_responses, &PyList_Type);
    if (partitions == NULL) return 0;
    ok = w_count(w, PyList_GET_SIZE(partitions), flexible);
    for (Py_ssize_t i = 0; ok && i < PyList_GET_SIZE(partitions); i++) {
        ok = w_partition(w, PyList_GET_ITEM(partitions, i), version);
    }
    Py_DECREF(partitions);
    if (ok && flexible) ok = no_tagged(t) && w_uvarint(w, 0);
    return ok;
}

static PyObject *p_encode_produce_response(PyObject *m, PyObject *const *args,
                                           Py_ssize_t nargs) {
    if (c_response == NULL || nargs != 3 || Py_TYPE(args[0]) != (PyTypeObject *)c_response ||
        !PyLong_CheckExact(args[1]) || !PyLong_CheckExact(args[2])) {
        Py_RETURN_NONE;
    }
    long version = PyLong_AsLong(args[1]);
    int overflow;
    long long correlation = PyLong_AsLongLongAndOverflow(args[2], &overflow);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (version < 3 || version > 12 || overflow || correlation < INT32_MIN ||
        correlation > INT32_MAX) {
        Py_RETURN_NONE;
    }
    int flexible = version >= 9;
    PyObject *body = args[0];
    Writer *w = PyMem_Malloc(sizeof(Writer));
    if (w == NULL) return PyErr_NoMemory();
    w->n = 0;
    int64_t throttle;
    int ok = w_int(w, 0, 4) && w_int(w, correlation, 4) && (!flexible || w_uvarint(w, 0));
    PyObject *topics = ok ? get_exact(body, n_responses, &PyList_Type) : NULL;
    ok = topics != NULL && w_count(w, PyList_GET_SIZE(topics), flexible);
    for (Py_ssize_t i = 0; ok && i < PyList_GET_SIZE(topics); i++) {
        ok = w_topic(w, PyList_GET_ITEM(topics, i), version);
    }
    Py_XDECREF(topics);
    if (ok && version >= 10) { /* node_endpoints (tag 0) only when there are some */
        PyObject *endpoints = get_exact(body, n_node_endpoints, &PyList_Type);
        ok = endpoints != NULL && PyList_GET_SIZE(endpoints) == 0;
        Py_XDECREF(endpoints);
    }
    ok = ok && get_int(body, n_throttle_time_ms, INT32_MIN, INT32_MAX, &throttle) &&
         w_int(w, throttle, 4) && (!flexible || (no_tagged(body) && w_uvarint(w, 0)));
    PyObject *result = NULL;
    if (ok) {
        Py_ssize_t size = w->n - 4;
        for (int i = 3; i >= 0; i--) {
            w->d[i] = (uint8_t)(size & 0xFF);
            size >>= 8;
        }
        result = PyBytes_FromStringAndSize((const char *)w->d, w->n);
    }
    PyMem_Free(w);
    if (!ok) Py_RETURN_NONE;
    return result;
}

static PyObject *p_install_produce_response(PyObject *m, PyObject *const *args,
                                            Py_ssize_t nargs) {
    if (nargs != 3 || !PyType_Check(args[0]) || !PyType_Check(args[1]) ||
        !PyType_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError,
                        "install_produce_response(ProduceResponse, TopicProduceResponse, "
                        "PartitionProduceResponse)");
        return NULL;
    }
    Py_XSETREF(c_response, Py_NewRef(args[0]));
    Py_XSETREF(c_topic_response, Py_NewRef(args[1]));
    Py_XSETREF(c_partition_response, Py_NewRef(args[2]));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"decode_produce", (PyCFunction)(void (*)(void))p_decode_produce, METH_FASTCALL,
     "A whole Produce request frame (v3-v12) as a framing.Request, or None."},
    {"install_produce", (PyCFunction)(void (*)(void))p_install_produce, METH_FASTCALL,
     "The generated classes decode_produce builds."},
    {"encode_produce_response", (PyCFunction)(void (*)(void))p_encode_produce_response,
     METH_FASTCALL, "A whole ProduceResponse frame (v3-v12), or None: not the plain case."},
    {"install_produce_response", (PyCFunction)(void (*)(void))p_install_produce_response,
     METH_FASTCALL, "The generated classes encode_produce_response encodes."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_produce", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__produce(void) {
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
                 {&n_records, "records"},
                 {&n_responses, "responses"},
                 {&n_throttle_time_ms, "throttle_time_ms"},
                 {&n_partition_responses, "partition_responses"},
                 {&n_error_code, "error_code"},
                 {&n_base_offset, "base_offset"},
                 {&n_log_append_time_ms, "log_append_time_ms"},
                 {&n_log_start_offset, "log_start_offset"},
                 {&n_record_errors, "record_errors"},
                 {&n_error_message, "error_message"},
                 {&n_header, "header"},
                 {&n_current_leader, "current_leader"},
                 {&n_leader_id, "leader_id"},
                 {&n_leader_epoch, "leader_epoch"},
                 {&n_node_endpoints, "node_endpoints"},
                 {&n_body, "body"}};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (*names[i].slot == NULL) {
            *names[i].slot = PyUnicode_InternFromString(names[i].text);
            if (*names[i].slot == NULL) return NULL;
        }
    }
    return PyModule_Create(&module);
}
