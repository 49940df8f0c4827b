/* riverlog.protocol.records._walk: the compiled record walk of v2 batches.
 *
 * The accelerated twin of riverlog/protocol/records/walk.py (read that module's docstring:
 * it owns the semantics; this file must answer exactly as its pure-Python functions do, and
 * the tests run both). Two functions over the *uncompressed* records of one batch:
 *
 *   scan(data, count, base_timestamp, ts_low, ts_high, require_keys)
 *       -> (problem: str | None, errors: list[(index, kind)])
 *     The broker's validation: walks every record's framing without creating objects,
 *     reports records whose offset delta is not their index (kind 2), whose key is null
 *     when keys are required (kind 3), whose timestamp is outside [ts_low, ts_high]
 *     (kind 4; -1, no timestamp, is never outside); a record whose framing is broken ends the walk (kind 1). `problem` names a
 *     batch-level fault (records missing or bytes left over).
 *
 *   decode(out, data, count, base_offset, base_timestamp, append_time, min_offset, topic,
 *          partition, timestamp_type, record_type)
 *     The consumer's decoding: appends one `record_type` tuple (topic, partition, offset,
 *     timestamp, timestamp_type, key, value, headers) per record at or after min_offset.
 *     Raises ValueError on any malformed record.
 *
 *   chase(data, pos, count, end, out)
 *     Where the next `count` records from `pos` begin, following their length prefixes
 *     only, written as int32 into the writable buffer `out`; the last must end at `end`.
 *     Raises ValueError when the framing leaves `data` or does not add up.
 *
 *   fields(data, begins, ends, ts_delta, offset_delta, key_start, key_len, value_start,
 *          value_len, header_count, header_pos)
 *     The columnar decode of records already chased (`begins`, `ends`: int32 per record):
 *     writes every record's fields into the writable buffers (ts_delta int64, the others
 *     int32), checked as client/arrow.py's `_Fields` checks them. Raises ValueError on any
 *     malformed record.
 *
 *   gather(data, starts, offsets, out)
 *     Copies the slices data[starts[i] : starts[i] + offsets[i+1] - offsets[i]] one after
 *     another into the writable buffer `out` at offsets[i] (`starts` int32 per slice,
 *     `offsets` int32, one more): the data buffer of an Arrow binary column whose offsets are
 *     `offsets` (client/arrow.py's keys and values). Raises ValueError when a slice leaves
 *     `data` or `out`, or the offsets decrease.
 *
 * `chase`, `fields` and `gather` run without the GIL (they only touch the buffers they were
 * given, held for the call), so the consumer's network thread keeps fetching meanwhile.
 *
 * Invariants: every read is bounds-checked against the buffer; varints longer than their
 * type allows are errors; no Python object is created per record by `scan`.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define KIND_FRAMING 1
#define KIND_OFFSET 2
#define KIND_KEY 3
#define KIND_TIMESTAMP 4

static int read_unsigned(const uint8_t *p, Py_ssize_t end, Py_ssize_t *pos, uint64_t *out,
                         int max_bytes) {
    uint64_t value = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (*pos >= end) return -1;
        uint8_t b = p[(*pos)++];
        if (i == 9 && (b & 0x7F) > 1) return -1; /* more than 64 bits */
        value |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = value;
            return 0;
        }
        shift += 7;
    }
    return -1;
}

static inline int read_varint(const uint8_t *p, Py_ssize_t end, Py_ssize_t *pos,
                              int32_t *out) {
    Py_ssize_t q = *pos;
    if (q < end && p[q] < 0x80) { /* one byte: the common case */
        uint32_t x = p[q];
        *out = (int32_t)((x >> 1) ^ (~(x & 1) + 1));
        *pos = q + 1;
        return 0;
    }
    if (q + 1 < end && p[q + 1] < 0x80) { /* two bytes: lengths of records and values */
        uint32_t x = (p[q] & 0x7Fu) | ((uint32_t)p[q + 1] << 7);
        *out = (int32_t)((x >> 1) ^ (~(x & 1) + 1));
        *pos = q + 2;
        return 0;
    }
    uint64_t raw;
    if (read_unsigned(p, end, pos, &raw, 5) || raw > 0xFFFFFFFFu) return -1;
    uint32_t x = (uint32_t)raw;
    *out = (int32_t)((x >> 1) ^ (~(x & 1) + 1));
    return 0;
}

static inline int read_varlong(const uint8_t *p, Py_ssize_t end, Py_ssize_t *pos,
                               int64_t *out) {
    Py_ssize_t q = *pos;
    if (q < end && p[q] < 0x80) { /* one byte: timestamp deltas within a batch are small */
        uint64_t x = p[q];
        *out = (int64_t)((x >> 1) ^ (~(x & 1) + 1));
        *pos = q + 1;
        return 0;
    }
    uint64_t raw;
    if (read_unsigned(p, end, pos, &raw, 10)) return -1;
    *out = (int64_t)((raw >> 1) ^ (~(raw & 1) + 1));
    return 0;
}

typedef struct {
    int64_t timestamp_delta;
    int32_t offset_delta;
    Py_ssize_t key_pos;
    int32_t key_len;
    Py_ssize_t value_pos;
    int32_t value_len;
    Py_ssize_t headers_pos;
    int32_t header_count;
} record_t;

/* One record at *pos: its fields in *r and *pos after it; NULL or what is wrong. */
static const char *parse_record(const uint8_t *p, Py_ssize_t n, Py_ssize_t *pos, record_t *r) {
    int32_t length;
    if (read_varint(p, n, pos, &length)) return "record length is not a valid varint";
    if (length < 1 || length > n - *pos) return "record length does not fit the batch";
    Py_ssize_t end = *pos + length;
    Py_ssize_t q = *pos + 1; /* attributes */
    if (read_varlong(p, end, &q, &r->timestamp_delta))
        return "record timestamp delta is malformed";
    if (read_varint(p, end, &q, &r->offset_delta)) return "record offset delta is malformed";
    if (r->offset_delta < 0) return "negative record offset delta";
    if (read_varint(p, end, &q, &r->key_len)) return "record key length is malformed";
    if (r->key_len < -1 || r->key_len > end - q) return "record key length does not fit";
    r->key_pos = q;
    if (r->key_len > 0) q += r->key_len;
    if (read_varint(p, end, &q, &r->value_len)) return "record value length is malformed";
    if (r->value_len < -1 || r->value_len > end - q) return "record value length does not fit";
    r->value_pos = q;
    if (r->value_len > 0) q += r->value_len;
    if (read_varint(p, end, &q, &r->header_count)) return "record header count is malformed";
    if (r->header_count < 0) return "negative header count";
    r->headers_pos = q;
    for (int32_t i = 0; i < r->header_count; i++) {
        int32_t len;
        if (read_varint(p, end, &q, &len) || len < 0 || len > end - q)
            return "record header key is malformed";
        q += len;
        if (read_varint(p, end, &q, &len) || len < -1 || len > end - q)
            return "record header value is malformed";
        if (len > 0) q += len;
    }
    if (q != end) return "record holds bytes after its fields";
    *pos = end;
    return NULL;
}

/* The header keys of a parsed record must be UTF-8 (they become str). -1 with an error set
 * when not; with `out`, the (key, value) pairs are appended to it. */
static int read_headers(const uint8_t *p, Py_ssize_t n, const record_t *r, PyObject *out) {
    Py_ssize_t q = r->headers_pos;
    for (int32_t i = 0; i < r->header_count; i++) {
        int32_t klen = 0, vlen = 0;
        read_varint(p, n, &q, &klen); /* checked by parse_record */
        PyObject *key = PyUnicode_DecodeUTF8((const char *)p + q, klen, "strict");
        if (key == NULL) return -1;
        q += klen;
        read_varint(p, n, &q, &vlen);
        if (out == NULL) {
            Py_DECREF(key);
            if (vlen > 0) q += vlen;
            continue;
        }
        PyObject *value;
        if (vlen < 0) {
            value = Py_None;
            Py_INCREF(value);
        } else {
            value = PyBytes_FromStringAndSize((const char *)p + q, vlen);
            if (value == NULL) {
                Py_DECREF(key);
                return -1;
            }
            q += vlen;
        }
        PyObject *pair = PyTuple_Pack(2, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (pair == NULL || PyList_Append(out, pair)) {
            Py_XDECREF(pair);
            return -1;
        }
        Py_DECREF(pair);
    }
    return 0;
}

static int add_error(PyObject *errors, Py_ssize_t index, int kind) {
    PyObject *item = Py_BuildValue("(ni)", index, kind);
    if (item == NULL) return -1;
    int rc = PyList_Append(errors, item);
    Py_DECREF(item);
    return rc;
}

static PyObject *walk_scan(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    Py_ssize_t count;
    long long base_timestamp, ts_low, ts_high;
    int require_keys;
    if (!PyArg_ParseTuple(args, "y*nLLLp", &view, &count, &base_timestamp, &ts_low, &ts_high,
                          &require_keys))
        return NULL;
    const uint8_t *p = view.buf;
    Py_ssize_t n = view.len, pos = 0;
    PyObject *errors = PyList_New(0);
    const char *problem = NULL;
    char message[96];
    if (errors == NULL) goto fail;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (pos >= n) {
            snprintf(message, sizeof message, "the batch declares %zd records but holds %zd",
                     count, i);
            problem = message;
            break;
        }
        record_t r;
        if (parse_record(p, n, &pos, &r) != NULL) {
            if (add_error(errors, i, KIND_FRAMING)) goto fail;
            goto done;
        }
        if (r.header_count && read_headers(p, n, &r, NULL)) {
            PyErr_Clear();
            if (add_error(errors, i, KIND_FRAMING)) goto fail;
            goto done;
        }
        if (r.offset_delta != i && add_error(errors, i, KIND_OFFSET)) goto fail;
        if (require_keys && r.key_len < 0 && add_error(errors, i, KIND_KEY)) goto fail;
        if (ts_low <= ts_high) {
            int64_t ts;
            if (__builtin_add_overflow((int64_t)base_timestamp, r.timestamp_delta, &ts) ||
                (ts != -1 && (ts < ts_low || ts > ts_high))) {
                if (add_error(errors, i, KIND_TIMESTAMP)) goto fail;
            }
        }
    }
    if (problem == NULL && pos != n && PyList_GET_SIZE(errors) == 0) {
        snprintf(message, sizeof message, "the batch holds %zd bytes after its %zd records",
                 n - pos, count);
        problem = message;
    }
done:
    PyBuffer_Release(&view);
    {
        PyObject *result = Py_BuildValue("(zN)", problem, errors);
        return result;
    }
fail:
    PyBuffer_Release(&view);
    Py_XDECREF(errors);
    return NULL;
}

static PyObject *nullable_bytes(const uint8_t *p, Py_ssize_t pos, int32_t len) {
    if (len < 0) Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)p + pos, len);
}

static PyObject *walk_decode(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *out, *topic, *partition, *timestamp_type;
    PyTypeObject *record_type;
    Py_buffer view;
    Py_ssize_t count;
    long long base_offset, base_timestamp, append_time, min_offset;
    if (!PyArg_ParseTuple(args, "O!y*nLLLLOOOO!", &PyList_Type, &out, &view, &count,
                          &base_offset, &base_timestamp, &append_time, &min_offset, &topic,
                          &partition, &timestamp_type, &PyType_Type, &record_type))
        return NULL;
    if (!PyType_IsSubtype(record_type, &PyTuple_Type)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "record_type must be a tuple type");
        return NULL;
    }
    const uint8_t *p = view.buf;
    Py_ssize_t n = view.len, pos = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        record_t r;
        const char *error = pos >= n ? "the batch holds fewer records than it declares"
                                     : parse_record(p, n, &pos, &r);
        if (error != NULL) {
            PyErr_SetString(PyExc_ValueError, error);
            goto fail;
        }
        int64_t offset, timestamp;
        if (__builtin_add_overflow((int64_t)base_offset, (int64_t)r.offset_delta, &offset)) {
            PyErr_SetString(PyExc_ValueError, "record offset does not fit 64 bits");
            goto fail;
        }
        if (append_time >= 0) {
            timestamp = append_time;
        } else if (__builtin_add_overflow((int64_t)base_timestamp, r.timestamp_delta,
                                          &timestamp)) {
            PyErr_SetString(PyExc_ValueError, "record timestamp does not fit 64 bits");
            goto fail;
        }
        PyObject *headers = PyList_New(0);
        if (headers == NULL) goto fail;
        if (r.header_count && read_headers(p, n, &r, headers)) {
            Py_DECREF(headers);
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                PyErr_SetString(PyExc_ValueError, "record header key is not UTF-8");
            }
            goto fail;
        }
        if (offset < min_offset) {
            Py_DECREF(headers);
            continue;
        }
        PyObject *record = record_type->tp_alloc(record_type, 8);
        if (record == NULL) {
            Py_DECREF(headers);
            goto fail;
        }
        Py_INCREF(topic);
        PyTuple_SET_ITEM(record, 0, topic);
        Py_INCREF(partition);
        PyTuple_SET_ITEM(record, 1, partition);
        PyTuple_SET_ITEM(record, 2, PyLong_FromLongLong(offset));
        PyTuple_SET_ITEM(record, 3, PyLong_FromLongLong(timestamp));
        Py_INCREF(timestamp_type);
        PyTuple_SET_ITEM(record, 4, timestamp_type);
        PyTuple_SET_ITEM(record, 5, nullable_bytes(p, r.key_pos, r.key_len));
        PyTuple_SET_ITEM(record, 6, nullable_bytes(p, r.value_pos, r.value_len));
        PyTuple_SET_ITEM(record, 7, headers);
        for (int k = 2; k < 7; k++) {
            if (PyTuple_GET_ITEM(record, k) == NULL) {
                Py_DECREF(record);
                goto fail;
            }
        }
        int rc = PyList_Append(out, record);
        Py_DECREF(record);
        if (rc) goto fail;
    }
    if (pos != n) {
        PyErr_SetString(PyExc_ValueError, "the batch holds bytes after its records");
        goto fail;
    }
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
fail:
    PyBuffer_Release(&view);
    return NULL;
}

static PyObject *walk_chase(PyObject *self, PyObject *args) {
    Py_buffer data, out;
    Py_ssize_t pos, count, end;
    if (!PyArg_ParseTuple(args, "y*nnnw*", &data, &pos, &count, &end, &out)) return NULL;
    const unsigned char *p = data.buf;
    const Py_ssize_t n = data.len;
    int32_t *begins = out.buf;
    const char *problem = NULL;
    if (count < 0 || out.len < count * (Py_ssize_t)sizeof(int32_t) || n > INT32_MAX)
        problem = "chase: bad arguments";
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count && problem == NULL; i++) {
        if (pos < 0 || pos >= n) {
            problem = "malformed record framing: a record starts outside the records";
            break;
        }
        begins[i] = (int32_t)pos;
        uint64_t raw = 0;
        int shift = 0, done = 0;
        Py_ssize_t q = pos;
        while (q < n && shift < 35) {
            unsigned c = p[q++];
            raw |= (uint64_t)(c & 0x7F) << shift;
            shift += 7;
            if (c < 0x80) {
                done = 1;
                break;
            }
        }
        int64_t length = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
        if (!done || raw > 0xFFFFFFFFu || length < 1) {
            problem = "malformed record framing: bad record length";
            break;
        }
        pos = q + (Py_ssize_t)length;
    }
    Py_END_ALLOW_THREADS
    if (problem == NULL && pos != end) problem = "records do not add up to their batch's size";
    PyBuffer_Release(&data);
    PyBuffer_Release(&out);
    if (problem != NULL) {
        PyErr_SetString(PyExc_ValueError, problem);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *walk_fields(PyObject *self, PyObject *args) {
    Py_buffer v[11];
    if (!PyArg_ParseTuple(args, "y*y*y*w*w*w*w*w*w*w*w*", &v[0], &v[1], &v[2], &v[3], &v[4],
                          &v[5], &v[6], &v[7], &v[8], &v[9], &v[10]))
        return NULL;
    const uint8_t *p = v[0].buf;
    const Py_ssize_t n = v[1].len / (Py_ssize_t)sizeof(int32_t);
    const int32_t *begins = v[1].buf, *ends = v[2].buf;
    int64_t *ts = v[3].buf;
    int32_t *od = v[4].buf, *ks = v[5].buf, *kl = v[6].buf, *vs = v[7].buf, *vl = v[8].buf;
    int32_t *hc = v[9].buf, *hp = v[10].buf;
    const char *problem = NULL;
    if (v[2].len != v[1].len || v[3].len < n * 8) problem = "fields: bad arguments";
    for (int k = 4; k < 11 && problem == NULL; k++)
        if (v[k].len < n * 4) problem = "fields: bad arguments";
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && problem == NULL; i++) {
        Py_ssize_t pos = begins[i], end = ends[i];
        int32_t length, delta, klen, vlen, count;
        int64_t tdelta;
        if (pos < 0 || end > v[0].len || pos >= end) {
            problem = "record length is not positive";
            break;
        }
        if (read_varint(p, end, &pos, &length) || length != end - pos) {
            problem = "record length does not match its batch";
            break;
        }
        pos += 1; /* attributes */
        if (read_varlong(p, end, &pos, &tdelta) || read_varint(p, end, &pos, &delta) ||
            delta < 0) {
            problem = "malformed record timestamp or offset delta";
            break;
        }
        if (read_varint(p, end, &pos, &klen) || klen < -1 || klen > end - pos) {
            problem = "malformed record key";
            break;
        }
        ks[i] = (int32_t)pos;
        pos += klen > 0 ? klen : 0;
        if (read_varint(p, end, &pos, &vlen) || vlen < -1 || vlen > end - pos) {
            problem = "malformed record value";
            break;
        }
        vs[i] = (int32_t)pos;
        pos += vlen > 0 ? vlen : 0;
        if (read_varint(p, end, &pos, &count) || count < 0 || (count == 0 && pos != end)) {
            problem = "malformed record headers, or bytes after the record's fields";
            break;
        }
        ts[i] = tdelta;
        od[i] = delta;
        kl[i] = klen;
        vl[i] = vlen;
        hc[i] = count;
        hp[i] = (int32_t)pos;
    }
    Py_END_ALLOW_THREADS
    for (int k = 0; k < 11; k++) PyBuffer_Release(&v[k]);
    if (problem != NULL) {
        PyErr_SetString(PyExc_ValueError, problem);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *walk_gather(PyObject *self, PyObject *args) {
    Py_buffer data, starts, offsets, out;
    if (!PyArg_ParseTuple(args, "y*y*y*w*", &data, &starts, &offsets, &out)) return NULL;
    const uint8_t *p = data.buf;
    uint8_t *o = out.buf;
    const Py_ssize_t n = starts.len / (Py_ssize_t)sizeof(int32_t);
    const int32_t *start = starts.buf, *off = offsets.buf;
    const char *problem = NULL;
    if (offsets.len < (n + 1) * (Py_ssize_t)sizeof(int32_t) || (n >= 0 && off[0] < 0))
        problem = "gather: bad arguments";
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && problem == NULL; i++) {
        const Py_ssize_t at = start[i], to = off[i], len = (Py_ssize_t)off[i + 1] - off[i];
        if (len < 0 || at < 0 || at > data.len - len || to > out.len - len) {
            problem = "gather: a slice leaves its buffer";
            break;
        }
        memcpy(o + to, p + at, (size_t)len);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&out);
    if (problem != NULL) {
        PyErr_SetString(PyExc_ValueError, problem);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"gather", walk_gather, METH_VARARGS, "Copy slices one after another (an Arrow column)."},
    {"fields", walk_fields, METH_VARARGS, "Decode the fields of chased records."},
    {"chase", walk_chase, METH_VARARGS, "Where the next records of a batch begin."},
    {"scan", walk_scan, METH_VARARGS, "Validate the records of one uncompressed batch."},
    {"decode", walk_decode, METH_VARARGS, "Append one batch's records to a list."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_walk", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__walk(void) { return PyModule_Create(&module); }
