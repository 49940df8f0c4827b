/* The TLS read loop in C: every decrypted record an OpenSSL connection holds, into one buffer.
 *
 * asyncio's SSLProtocol reads one TLS record per Python-level `SSLObject.read` call; librdkafka
 * writes ~2 KiB records, so a 1 MB Produce request is ~500 calls through Python (see
 * server/tls_read.py, which owns the verification and the fallback, and docs/field-notes.md).
 * `drain(sslsock, buffer)` calls OpenSSL's SSL_read_ex in a loop instead and answers
 * (bytes, status): status 0 the buffer is full, 1 OpenSSL wants more input, 2 the peer sent
 * close_notify, 3 any other condition (the caller lets Python's own `read` raise it).
 *
 * No OpenSSL headers or link: `init(read_ex, get_error)` takes the addresses of SSL_read_ex
 * and SSL_get_error from the very libssl Python's `_ssl` module uses (tls_read.py finds them
 * through `_ssl`'s handle), so both work on the same library's objects. The `SSL *` is the
 * field after the weak socket reference at the start of CPython's `PySSLSocket` (unchanged
 * from 3.7 to 3.13); tls_read.py checks it against the object's context before use.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define SSL_ERROR_WANT_READ 2
#define SSL_ERROR_ZERO_RETURN 6

typedef int (*read_ex_fn)(void *ssl, void *buf, size_t num, size_t *readbytes);
typedef int (*get_error_fn)(const void *ssl, int ret);

static read_ex_fn read_ex = NULL;
static get_error_fn get_error = NULL;

typedef struct {
    PyObject_HEAD
    PyObject *socket; /* weak reference, NULL with MemoryBIOs */
    void *ssl;
} SslSocketHead;

static PyObject *init(PyObject *self, PyObject *args) {
    unsigned long long read_addr, error_addr;
    if (!PyArg_ParseTuple(args, "KK", &read_addr, &error_addr)) return NULL;
    if (read_addr == 0 || error_addr == 0) {
        PyErr_SetString(PyExc_ValueError, "null OpenSSL function address");
        return NULL;
    }
    read_ex = (read_ex_fn)(uintptr_t)read_addr;
    get_error = (get_error_fn)(uintptr_t)error_addr;
    Py_RETURN_NONE;
}

static PyObject *ssl_pointer(PyObject *self, PyObject *sslsock) {
    return PyLong_FromVoidPtr(((SslSocketHead *)sslsock)->ssl);
}

static PyObject *drain(PyObject *self, PyObject *args) {
    PyObject *sslsock;
    Py_buffer buffer;
    if (read_ex == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_tls_drain.init was not called");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "Ow*", &sslsock, &buffer)) return NULL;
    void *ssl = ((SslSocketHead *)sslsock)->ssl;
    size_t total = 0, got = 0;
    int status = 0;
    while (total < (size_t)buffer.len) {
        if (read_ex(ssl, (char *)buffer.buf + total, (size_t)buffer.len - total, &got)) {
            total += got;
            continue;
        }
        int error = get_error(ssl, 0);
        status = error == SSL_ERROR_WANT_READ ? 1 : error == SSL_ERROR_ZERO_RETURN ? 2 : 3;
        break;
    }
    PyBuffer_Release(&buffer);
    return Py_BuildValue("(ni)", (Py_ssize_t)total, status);
}

static PyMethodDef methods[] = {
    {"init", init, METH_VARARGS, "init(SSL_read_ex address, SSL_get_error address)"},
    {"ssl_pointer", ssl_pointer, METH_O, "the SSL * of an _ssl._SSLSocket (for checking)"},
    {"drain", drain, METH_VARARGS, "drain(sslsock, buffer) -> (bytes, status)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tls_drain", NULL, -1, methods};

PyMODINIT_FUNC PyInit__tls_drain(void) { return PyModule_Create(&module); }
