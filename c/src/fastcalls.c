/*
 * opaque_ops fast calls: set_tensor, invoke and get_tensor of one in-process
 * Interpreter, each in one C call.
 *
 * Why C: on a tiny model the whole of set_tensor + invoke + get_tensor is
 * about a microsecond, and the Python around TFLite's calls (three Python
 * frames, the lock taken and released in bytecode, cffi's argument
 * conversion) was a third of it.  This module does only the common case of
 * each call and hands every other case, unchanged, to the Python method it
 * stands in for (opaque_ops/interpreter/core.py), which stays the reference:
 * the tests run both and compare them bit for bit and error for error.
 *
 * What each fast call does, and why it is the same as the Python path:
 *
 * - The interpreter's call lock is a Lock object from this module (the
 *   Python paths take it through its acquire/release methods), so both paths
 *   serialize on one lock.  A fast call only ever tries it without blocking;
 *   when it is busy, the Python method runs and does the waiting (and the
 *   re-entry check).
 * - set_tensor and get_tensor use the interpreter's dict of cached views
 *   (Interpreter._slots: tensor index -> (view, dtype, shape, ...)), the same
 *   dict the Python fast path reads, so a view dropped there is dropped here.
 *   They run no Python code while they hold the lock (the index must be an
 *   exact int, so the dict lookup calls no __hash__ or __eq__ of the
 *   caller's), which is why they need not mark CallLock.owner.  The lock
 *   itself records its holder at every acquisition (LockObject.holder), the
 *   answer call_lock reads to refuse a re-entered call.
 * - invoke marks the owner (CallLock.owner, set through its descriptor), as
 *   the Python path does, because a Python op may call back during it, and
 *   releases the GIL around TfLiteInterpreterInvoke, as cffi does.  It runs
 *   only while the Interpreter has bound it: allocated, Ctrl-C watch not
 *   armed, not closed.  On a model with a dynamic tensor, whose invoke may
 *   move memory, it first has the Python check refuse live tensor() views
 *   (when there are any), and afterwards drops every cached view whose
 *   tensor moved, as the Python method does.  An error status, or messages
 *   in the error sink, go to the Python handler under the lock.
 *
 * How the calls are reached: Interpreter.set_tensor, .invoke and .get_tensor
 * become Method descriptors (below) wrapping the Python functions.  Like a C
 * type's own methods, they are called with the instance as first argument
 * and no bound-method object in between; they find the instance's Calls in
 * its `_fast` attribute, and call the Python function when there is none
 * or when the Calls object does not handle the case.  `interp.invoke` taken
 * as a value is an ordinary bound method, holding the Interpreter.
 *
 * Ownership: a Calls object holds strong references to everything it uses,
 * never to the Interpreter (which holds it, in `_fast`: no reference cycle,
 * so an Interpreter is freed when its last reference goes).  While bound it
 * holds the NativeInterpreter object (so the TfLiteInterpreter it calls is
 * not freed under it) and its error sink.  The Interpreter drops the binding
 * (unbind) whenever it stops being ready to run.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------ Lock */

typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock;
    /* The thread holding it (PyThread_get_thread_ident), 0 when free.
     * Written only with the GIL held: set right after each acquisition,
     * cleared right before each release (lock_give).  It answers
     * _is_owned(), which call_lock asks when a signal handler's exception
     * (Ctrl-C) rises right after acquire() returned: whether that
     * acquire() took the lock is otherwise lost with its return value. */
    unsigned long holder;
} LockObject;

static int lock_try(LockObject *self) {
    if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) return 0;
    self->holder = PyThread_get_thread_ident();
    return 1;
}

static void lock_give(LockObject *self) {
    self->holder = 0;
    PyThread_release_lock(self->lock);
}

static PyObject *Lock_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    if (PyTuple_GET_SIZE(args) || (kw && PyDict_GET_SIZE(kw))) {
        PyErr_SetString(PyExc_TypeError, "Lock() takes no arguments");
        return NULL;
    }
    LockObject *self = (LockObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->lock = PyThread_allocate_lock();
    if (self->lock == NULL) {
        Py_DECREF(self);
        PyErr_SetString(PyExc_MemoryError, "cannot allocate a lock");
        return NULL;
    }
    return (PyObject *)self;
}

static void Lock_dealloc(LockObject *self) {
    if (self->lock != NULL) {
        /* A lock must be released before it is freed (POSIX semaphores and
         * mutexes alike); nobody can hold it any more, so take it first. */
        PyThread_acquire_lock(self->lock, NOWAIT_LOCK);
        PyThread_release_lock(self->lock);
        PyThread_free_lock(self->lock);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* acquire(blocking=True, timeout=-1): threading.Lock's contract. */
static PyObject *Lock_acquire(LockObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"blocking", "timeout", NULL};
    int blocking = 1;
    double timeout = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|pd:acquire", kwlist, &blocking, &timeout)) return NULL;
    if (!blocking && timeout != -1) {
        PyErr_SetString(PyExc_ValueError, "can't specify a timeout for a non-blocking call");
        return NULL;
    }
    if (timeout < 0 && timeout != -1) {
        PyErr_SetString(PyExc_ValueError, "timeout value must be a non-negative number");
        return NULL;
    }
    PY_TIMEOUT_T us = -1;
    if (!blocking) {
        us = 0;
    } else if (timeout >= 0) {
        double t = timeout * 1e6;
        if (t > (double)PY_TIMEOUT_MAX) {
            PyErr_SetString(PyExc_OverflowError, "timeout value is too large");
            return NULL;
        }
        us = (PY_TIMEOUT_T)t;
    }
    PyLockStatus r = PyThread_acquire_lock_timed(self->lock, 0, 0);
    if (r != PY_LOCK_ACQUIRED && us != 0) {
        Py_BEGIN_ALLOW_THREADS
        r = PyThread_acquire_lock_timed(self->lock, us, 0);
        Py_END_ALLOW_THREADS
    }
    if (r != PY_LOCK_ACQUIRED) Py_RETURN_FALSE;
    self->holder = PyThread_get_thread_ident();
    Py_RETURN_TRUE;
}

static PyObject *Lock_release(LockObject *self, PyObject *Py_UNUSED(ignored)) {
    if (lock_try(self)) { /* it was free: releasing it is the caller's bug */
        lock_give(self);
        PyErr_SetString(PyExc_RuntimeError, "release unlocked lock");
        return NULL;
    }
    lock_give(self);
    Py_RETURN_NONE;
}

static PyObject *Lock_locked(LockObject *self, PyObject *Py_UNUSED(ignored)) {
    if (lock_try(self)) {
        lock_give(self);
        Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

static PyObject *Lock_is_owned(LockObject *self, PyObject *Py_UNUSED(ignored)) {
    return PyBool_FromLong(self->holder != 0 && self->holder == PyThread_get_thread_ident());
}

static PyMethodDef Lock_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))Lock_acquire, METH_VARARGS | METH_KEYWORDS,
     "acquire(blocking=True, timeout=-1)\n--\n\nAs threading.Lock.acquire (a wait releases the GIL)."},
    {"release", (PyCFunction)Lock_release, METH_NOARGS, "release()\n--\n\nAs threading.Lock.release."},
    {"locked", (PyCFunction)Lock_locked, METH_NOARGS, "locked()\n--\n\nWhether the lock is held."},
    {"_is_owned", (PyCFunction)Lock_is_owned, METH_NOARGS,
     "_is_owned()\n--\n\nWhether this thread holds the lock (threading.RLock's name for it)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "opaque_ops._fastcalls.Lock",
    .tp_basicsize = sizeof(LockObject),
    .tp_dealloc = (destructor)Lock_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An interpreter's call lock: threading.Lock's acquire/release/locked, also taken by the fast calls.",
    .tp_methods = Lock_methods,
    .tp_new = Lock_new,
};

/* ----------------------------------------------------------------- Calls */

typedef int (*invoke_fn)(void *interpreter);

/* The Ctrl-C guard (c/src/sigint_guard.c, built into this module). */
typedef struct oo_sigint_job {
    void *interpreter;
    invoke_fn cancel;
} oo_sigint_job;
int oo_sigint_init(void);
int oo_sigint_decide(void);
int oo_sigint_enter(oo_sigint_job *job, oo_sigint_job **prev);
void oo_sigint_leave(oo_sigint_job *prev);
PyObject *opaque_ops_sigint_watch(PyObject *module, PyObject *install);
PyObject *opaque_ops_sigint_decider(PyObject *module, PyObject *callable);
PyObject *opaque_ops_guarded_invoke(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
/* TfLiteInterpreterGetTensor, TfLiteTensorData, TfLiteTensorByteSize,
 * TfLiteTensorNumDims, TfLiteTensorDim */
typedef void *(*get_tensor_fn)(const void *interpreter, int index);
typedef void *(*data_fn)(const void *tensor);
typedef size_t (*bytes_fn)(const void *tensor);
typedef int32_t (*ndims_fn)(const void *tensor);
typedef int32_t (*dim_fn)(const void *tensor, int32_t index);

typedef struct {
    PyObject_HEAD
    LockObject *lock;     /* the interpreter's call lock */
    PyObject *calls;      /* its CallLock, whose owner invoke marks */
    PyObject *owner;      /* CallLock.owner: the descriptor that sets it */
    PyObject *slots;      /* Interpreter._slots (a dict), shared */
    PyObject *failed;     /* failed(interp, status, native): raises the error of a failed invoke */
    PyObject *native;     /* while bound: keep-alive of the TfLiteInterpreter below */
    PyObject *sink;       /* while bound: the native interpreter's error sink (a list) */
    void *interpreter;    /* while bound: the TfLiteInterpreter* */
    invoke_fn invoke;     /* while bound: TfLiteInterpreterInvoke */
    invoke_fn cancel;     /* while bound: TfLiteInterpreterCancel, for Ctrl-C (NULL: the runtime has none) */
    /* While bound to a model whose invoke may move memory (a dynamic tensor):
     * the Interpreter's tensor() views (a WeakSet) and its check that none is
     * live, before(interp, what); after the run each cached view is compared
     * with where its tensor is now, through these five functions. */
    int moves;
    PyObject *views;
    PyObject *before;
    get_tensor_fn get_tensor;
    data_fn tensor_data;
    bytes_fn tensor_bytes;
    ndims_fn tensor_ndims;
    dim_fn tensor_dim;
} CallsObject;

static int Calls_traverse(CallsObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->lock);
    Py_VISIT(self->calls);
    Py_VISIT(self->owner);
    Py_VISIT(self->slots);
    Py_VISIT(self->failed);
    Py_VISIT(self->native);
    Py_VISIT(self->sink);
    Py_VISIT(self->views);
    Py_VISIT(self->before);
    return 0;
}

static void calls_unbind(CallsObject *self) {
    self->interpreter = NULL;
    self->invoke = NULL;
    self->cancel = NULL;
    self->moves = 0;
    Py_CLEAR(self->native);
    Py_CLEAR(self->sink);
    Py_CLEAR(self->views);
    Py_CLEAR(self->before);
}

static int Calls_clear(CallsObject *self) {
    calls_unbind(self);
    Py_CLEAR(self->lock);
    Py_CLEAR(self->calls);
    Py_CLEAR(self->owner);
    Py_CLEAR(self->slots);
    Py_CLEAR(self->failed);
    return 0;
}

static void Calls_dealloc(CallsObject *self) {
    PyObject_GC_UnTrack(self);
    Calls_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Calls(lock, calls, owner_descriptor, slots, failed) */
static PyObject *Calls_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *lock, *calls, *owner, *slots, *failed;
    if (kw && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "Calls() takes positional arguments only");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!OOO!O:Calls", &LockType, &lock, &calls, &owner, &PyDict_Type, &slots, &failed))
        return NULL;
    if (Py_TYPE(owner)->tp_descr_set == NULL) {
        PyErr_SetString(PyExc_TypeError, "Calls(): owner must be a data descriptor (CallLock.owner)");
        return NULL;
    }
    CallsObject *self = (CallsObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    Py_INCREF(lock);
    self->lock = (LockObject *)lock;
    Py_INCREF(calls);
    self->calls = calls;
    Py_INCREF(owner);
    self->owner = owner;
    Py_INCREF(slots);
    self->slots = slots;
    Py_INCREF(failed);
    self->failed = failed;
    return (PyObject *)self;
}

/* The addresses a Python caller passed: the TfLiteInterpreter* and `n` C API
 * functions.  0 and sets ValueError if any is null (a closed interpreter, a
 * runtime without the function), so that no C call goes through one. */
static int addresses_ok(const char *what, unsigned long long interp, const unsigned long long *fn, int n) {
    int ok = interp != 0;
    for (int i = 0; i < n; i++) ok = ok && fn[i] != 0;
    if (!ok) PyErr_Format(PyExc_ValueError, "%s(): a null interpreter or function", what);
    return ok;
}

/* bind(native, interpreter, functions, sink, moves, views, before, cancel): invoke may run in C.
 * functions: the addresses of TfLiteInterpreterInvoke, TfLiteInterpreterGetTensor,
 * TfLiteTensorData, TfLiteTensorByteSize, TfLiteTensorNumDims and TfLiteTensorDim;
 * cancel: TfLiteInterpreterCancel's, or 0 where the runtime has none. */
static PyObject *Calls_bind(CallsObject *self, PyObject *args) {
    PyObject *native, *sink, *views, *before;
    unsigned long long interp, fn[6], cancel;
    int moves;
    if (!PyArg_ParseTuple(args, "OK(KKKKKK)O!pOOK:bind", &native, &interp, &fn[0], &fn[1], &fn[2], &fn[3], &fn[4],
                          &fn[5], &PyList_Type, &sink, &moves, &views, &before, &cancel))
        return NULL;
    if (!addresses_ok("bind", interp, fn, 6)) return NULL;
    calls_unbind(self);
    Py_INCREF(native);
    self->native = native;
    Py_INCREF(sink);
    self->sink = sink;
    Py_INCREF(views);
    self->views = views;
    Py_INCREF(before);
    self->before = before;
    self->moves = moves;
    self->interpreter = (void *)(uintptr_t)interp;
    self->invoke = (invoke_fn)(uintptr_t)fn[0];
    self->cancel = (invoke_fn)(uintptr_t)cancel;
    self->get_tensor = (get_tensor_fn)(uintptr_t)fn[1];
    self->tensor_data = (data_fn)(uintptr_t)fn[2];
    self->tensor_bytes = (bytes_fn)(uintptr_t)fn[3];
    self->tensor_ndims = (ndims_fn)(uintptr_t)fn[4];
    self->tensor_dim = (dim_fn)(uintptr_t)fn[5];
    Py_RETURN_NONE;
}

static PyObject *Calls_unbind(CallsObject *self, PyObject *Py_UNUSED(ignored)) {
    calls_unbind(self);
    Py_RETURN_NONE;
}

static PyObject *Calls_bound(CallsObject *self, void *Py_UNUSED(closure)) {
    return PyBool_FromLong(self->interpreter != NULL);
}

static PyMethodDef Calls_methods[] = {
    {"bind", (PyCFunction)Calls_bind, METH_VARARGS,
     "bind(native, interpreter_address, invoke_address, sink)\n--\n\nLet invoke() call TFLite directly."},
    {"unbind", (PyCFunction)Calls_unbind, METH_NOARGS, "unbind()\n--\n\nSend every invoke() to the Python function."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Calls_getset[] = {
    {"bound", (getter)Calls_bound, NULL, "Whether invoke() calls TFLite directly.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject CallsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "opaque_ops._fastcalls.Calls",
    .tp_basicsize = sizeof(CallsObject),
    .tp_dealloc = (destructor)Calls_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The state the fast calls of one Interpreter use (see the file's comment).",
    .tp_traverse = (traverseproc)Calls_traverse,
    .tp_clear = (inquiry)Calls_clear,
    .tp_methods = Calls_methods,
    .tp_getset = Calls_getset,
    .tp_new = Calls_new,
};

/* -------------------------------------------------------- the fast calls */

/* What a fast call returns when it leaves the case to the Python function
 * (never a Python object: only compared against). */
static PyObject not_handled_object;
#define NOT_HANDLED (&not_handled_object)

/* The cached view of tensor `index` (an exact int) and its slot tuple, or
 * NULL (none, or an error set).  Borrowed. */
static PyArrayObject *cached_view(CallsObject *self, PyObject *index, PyObject **slot_out) {
    PyObject *slot = PyDict_GetItemWithError(self->slots, index);
    if (slot == NULL || !PyTuple_Check(slot) || PyTuple_GET_SIZE(slot) < 1) return NULL;
    PyObject *view = PyTuple_GET_ITEM(slot, 0);
    if (!PyArray_CheckExact(view)) return NULL;
    *slot_out = slot;
    return (PyArrayObject *)view;
}

static int same_shape(PyArrayObject *a, PyArrayObject *b) {
    int n = PyArray_NDIM(a);
    if (n != PyArray_NDIM(b)) return 0;
    npy_intp *da = PyArray_DIMS(a), *db = PyArray_DIMS(b);
    for (int i = 0; i < n; i++)
        if (da[i] != db[i]) return 0;
    return 1;
}

/* set_tensor(tensor_index, value) */
static PyObject *fast_set(CallsObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (kwnames != NULL || nargs != 2 || !PyLong_CheckExact(args[0]) || !PyArray_CheckExact(args[1]))
        return NOT_HANDLED;
    PyArrayObject *value = (PyArrayObject *)args[1];
    if (!lock_try(self->lock)) return NOT_HANDLED; /* busy: the Python function waits, or refuses re-entry */
    PyObject *slot = NULL;
    PyArrayObject *view = cached_view(self, args[0], &slot);
    /* The Python fast path's test (the same dtype object, the same shape),
     * plus C order: the one layout a single memmove copies. */
    if (view != NULL && PyArray_DESCR(value) == PyArray_DESCR(view) && same_shape(value, view) &&
        PyArray_IS_C_CONTIGUOUS(value)) {
        /* memmove: the value may be a view of this very tensor. */
        memmove(PyArray_DATA(view), PyArray_DATA(value), (size_t)PyArray_NBYTES(view));
        lock_give(self->lock);
        Py_RETURN_NONE;
    }
    lock_give(self->lock);
    return PyErr_Occurred() ? NULL : NOT_HANDLED;
}

/* get_tensor(tensor_index, subgraph_index=0) */
static PyObject *fast_get(CallsObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (kwnames != NULL || nargs < 1 || nargs > 2 || !PyLong_CheckExact(args[0])) return NOT_HANDLED;
    if (nargs == 2) {
        /* subgraph_index: an exact int 0 here; anything else is the Python function's. */
        int overflow = 0;
        if (!PyLong_CheckExact(args[1]) || PyLong_AsLongAndOverflow(args[1], &overflow) != 0 || overflow) {
            if (PyErr_Occurred()) PyErr_Clear();
            return NOT_HANDLED;
        }
    }
    PyObject *slot = NULL;
    PyArrayObject *view = cached_view(self, args[0], &slot);
    if (view == NULL) return PyErr_Occurred() ? NULL : NOT_HANDLED;
    /* The copy is allocated before the lock is taken: allocating may run
     * the garbage collector, and with it any Python code, which must not run
     * while this thread holds the lock with no owner marked. */
    Py_INCREF(slot);
    PyArray_Descr *descr = PyArray_DESCR(view);
    Py_INCREF(descr); /* PyArray_NewFromDescr steals it */
    PyObject *out =
        PyArray_NewFromDescr(&PyArray_Type, descr, PyArray_NDIM(view), PyArray_DIMS(view), NULL, NULL, 0, NULL);
    if (out == NULL) {
        Py_DECREF(slot);
        return NULL;
    }
    if (lock_try(self->lock)) {
        PyObject *now = PyDict_GetItemWithError(self->slots, args[0]);
        if (now == slot) { /* still cached: the same view, in place */
            memcpy(PyArray_DATA((PyArrayObject *)out), PyArray_DATA(view), (size_t)PyArray_NBYTES(view));
            lock_give(self->lock);
            Py_DECREF(slot);
            return out;
        }
        lock_give(self->lock);
    }
    Py_DECREF(out);
    Py_DECREF(slot);
    return PyErr_Occurred() ? NULL : NOT_HANDLED;
}

/* After an invoke that may have moved memory: drop each cached view whose
 * tensor is no longer where, and as, the view says (the Python path's
 * Interpreter._keep_unmoved_slots).  Each tensor is looked up again by its
 * index: the invoke may have moved the TfLiteTensor structs themselves.
 * Runs no Python code (the keys are ints). */
typedef struct {
    get_tensor_fn get_tensor;
    data_fn tensor_data;
    bytes_fn tensor_bytes;
    ndims_fn tensor_ndims;
    dim_fn tensor_dim;
} placement_fns;

static void drop_moved(PyObject *slots, void *interp, const placement_fns *self) {
    PyObject *key, *slot, *moved = NULL;
    Py_ssize_t pos = 0;
    while (PyDict_Next(slots, &pos, &key, &slot)) {
        int stale = 1;
        int overflow = 0;
        long index = PyLong_CheckExact(key) ? PyLong_AsLongAndOverflow(key, &overflow) : -1;
        if (PyTuple_Check(slot) && PyTuple_GET_SIZE(slot) >= 1 && PyArray_CheckExact(PyTuple_GET_ITEM(slot, 0)) &&
            !overflow && index >= 0 && index <= INT32_MAX) {
            PyArrayObject *view = (PyArrayObject *)PyTuple_GET_ITEM(slot, 0);
            const void *t = self->get_tensor(interp, (int)index);
            if (t != NULL && self->tensor_data(t) == PyArray_DATA(view) &&
                       self->tensor_bytes(t) == (size_t)PyArray_NBYTES(view) &&
                       self->tensor_ndims(t) == PyArray_NDIM(view)) {
                stale = 0;
                for (int i = 0; i < PyArray_NDIM(view); i++)
                    if (self->tensor_dim(t, i) != PyArray_DIMS(view)[i]) stale = 1;
            }
        }
        if (stale) {
            if (moved == NULL) moved = PyList_New(0);
            if (moved == NULL || PyList_Append(moved, key) < 0) break;
        }
    }
    if (moved != NULL) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(moved); i++)
            if (PyDict_DelItem(slots, PyList_GET_ITEM(moved, i)) < 0) PyErr_Clear();
        Py_DECREF(moved);
    }
    if (PyErr_Occurred()) {
        /* Out of memory listing them: drop every view rather than keep a stale one. */
        PyErr_Clear();
        PyDict_Clear(slots);
    }
}

static void drop_moved_views(CallsObject *self, void *interp) {
    placement_fns fns = {self->get_tensor, self->tensor_data, self->tensor_bytes, self->tensor_ndims,
                         self->tensor_dim};
    drop_moved(self->slots, interp, &fns);
}

/* drop_moved_views(slots, native, interpreter, (get_tensor, data, byte_size, num_dims, dim))
 *
 * The same as after a fast invoke, for the Python paths that invoke a model
 * whose invoke may move memory (a signature runner's call): one C call
 * instead of four to seven cffi calls per cached view.  `native` is held for
 * the call (it owns the TfLiteInterpreter); the caller holds the call lock. */
static PyObject *drop_moved_views_py(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *slots, *native;
    unsigned long long interp, fn[5];
    if (!PyArg_ParseTuple(args, "O!OK(KKKKK):drop_moved_views", &PyDict_Type, &slots, &native, &interp, &fn[0],
                          &fn[1], &fn[2], &fn[3], &fn[4]))
        return NULL;
    if (!addresses_ok("drop_moved_views", interp, fn, 5)) return NULL;
    placement_fns fns = {(get_tensor_fn)(uintptr_t)fn[0], (data_fn)(uintptr_t)fn[1], (bytes_fn)(uintptr_t)fn[2],
                         (ndims_fn)(uintptr_t)fn[3], (dim_fn)(uintptr_t)fn[4]};
    Py_INCREF(native);
    drop_moved(slots, (void *)(uintptr_t)interp, &fns);
    Py_DECREF(native);
    Py_RETURN_NONE;
}

static int set_owner(CallsObject *self, PyObject *value) {
    return Py_TYPE(self->owner)->tp_descr_set(self->owner, self->calls, value);
}

/* invoke() */
static PyObject *fast_invoke(CallsObject *self, PyObject *interp_obj, Py_ssize_t nargs, PyObject *kwnames) {
    if (kwnames != NULL || nargs != 0 || self->interpreter == NULL) return NOT_HANDLED;
    /* Ctrl-C: the main thread's first invoke decides (sigint_guard.c); before the lock. */
    if (oo_sigint_decide() < 0) return NULL;
    if (!lock_try(self->lock)) return NOT_HANDLED;
    /* Read again under the lock (unbind happens under it). */
    void *interp = self->interpreter;
    invoke_fn fn = self->invoke;
    if (interp == NULL) {
        lock_give(self->lock);
        return NOT_HANDLED;
    }
    PyObject *me = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
    if (me == NULL || set_owner(self, me) < 0) {
        Py_XDECREF(me);
        lock_give(self->lock);
        return NULL;
    }
    Py_DECREF(me);
    /* Keep-alive for the call: a Python op may close the interpreter (unbind) meanwhile. */
    PyObject *native = self->native, *sink = self->sink;
    Py_INCREF(native);
    Py_INCREF(sink);
    int moves = self->moves;
    PyObject *result = Py_None;
    Py_INCREF(result);
    if (moves && PyObject_Length(self->views) != 0) {
        /* tensor() views exist (or the length failed): the Python check
         * refuses while one is live (LiveViewsError). */
        PyObject *r = PyErr_Occurred() ? NULL : PyObject_CallFunction(self->before, "Os", interp_obj, "invoke()");
        if (r == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        Py_DECREF(r);
    }
    int status;
    /* Ctrl-C cancels this run when it is the main thread's (sigint_guard.c). */
    oo_sigint_job job = {interp, self->cancel}, *prev = NULL;
    int guarded = oo_sigint_enter(&job, &prev);
    Py_BEGIN_ALLOW_THREADS
    status = fn(interp);
    Py_END_ALLOW_THREADS
    if (guarded) oo_sigint_leave(prev);
    if (moves) drop_moved_views(self, interp);
    if (status != 0 || PyList_GET_SIZE(sink) != 0) {
        /* Raises the error (or returns, for messages only), under the lock as in Python. */
        PyObject *r = PyObject_CallFunction(self->failed, "OiO", interp_obj, status, native);
        if (r == NULL) Py_CLEAR(result);
        Py_XDECREF(r);
    }
done:
    Py_DECREF(native);
    Py_DECREF(sink);
    /* Clear the owner with any exception set aside: CallLock.owner is a
     * __slots__ member, whose set runs no Python code. */
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    int cleared = set_owner(self, Py_None);
    lock_give(self->lock);
    if (cleared < 0) {
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        Py_XDECREF(result);
        return NULL;
    }
    PyErr_Restore(et, ev, tb);
    return result;
}

/* ---------------------------------------------------------------- Method */

enum { KIND_SET, KIND_INVOKE, KIND_GET };

typedef struct {
    PyObject_HEAD
    PyObject *func; /* the Python function it stands in for */
    int kind;
    vectorcallfunc vectorcall;
} MethodObject;

static PyObject *str_fast; /* "_fast" */

static PyObject *Method_vectorcall(MethodObject *m, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs >= 1) {
        PyObject *calls = PyObject_GetAttr(args[0], str_fast);
        if (calls == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return NULL;
            PyErr_Clear();
        } else {
            PyObject *r = NOT_HANDLED;
            if (Py_TYPE(calls) == &CallsType) {
                CallsObject *c = (CallsObject *)calls;
                if (m->kind == KIND_SET)
                    r = fast_set(c, args + 1, nargs - 1, kwnames);
                else if (m->kind == KIND_GET)
                    r = fast_get(c, args + 1, nargs - 1, kwnames);
                else
                    r = fast_invoke(c, args[0], nargs - 1, kwnames);
            }
            Py_DECREF(calls);
            if (r != NOT_HANDLED) return r;
        }
    }
    return PyObject_Vectorcall(m->func, args, nargsf, kwnames);
}

static PyObject *Method_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *func;
    const char *kind;
    if (kw && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "Method() takes positional arguments only");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "Os:Method", &func, &kind)) return NULL;
    int k = strcmp(kind, "set_tensor") == 0 ? KIND_SET
            : strcmp(kind, "invoke") == 0   ? KIND_INVOKE
            : strcmp(kind, "get_tensor") == 0 ? KIND_GET
                                              : -1;
    if (k < 0 || !PyCallable_Check(func)) {
        PyErr_SetString(PyExc_ValueError, "Method(func, kind): kind is set_tensor, invoke or get_tensor");
        return NULL;
    }
    MethodObject *m = (MethodObject *)type->tp_alloc(type, 0);
    if (m == NULL) return NULL;
    Py_INCREF(func);
    m->func = func;
    m->kind = k;
    m->vectorcall = (vectorcallfunc)Method_vectorcall;
    return (PyObject *)m;
}

static int Method_traverse(MethodObject *m, visitproc visit, void *arg) {
    Py_VISIT(m->func);
    return 0;
}

static int Method_clear(MethodObject *m) {
    Py_CLEAR(m->func);
    return 0;
}

static void Method_dealloc(MethodObject *m) {
    PyObject_GC_UnTrack(m);
    Method_clear(m);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

/* interp.invoke as a value: an ordinary bound method (it holds the instance). */
static PyObject *Method_get(PyObject *m, PyObject *obj, PyObject *Py_UNUSED(type)) {
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(m);
        return m;
    }
    return PyMethod_New(m, obj);
}

/* The wrapped function's name, doc and signature (inspect follows __wrapped__). */
static PyObject *Method_getattro(MethodObject *m, PyObject *name) {
    PyObject *r = PyObject_GenericGetAttr((PyObject *)m, name);
    if (r != NULL || !PyErr_ExceptionMatches(PyExc_AttributeError)) return r;
    PyErr_Clear();
    return PyObject_GetAttr(m->func, name);
}

static PyObject *Method_wrapped(MethodObject *m, void *Py_UNUSED(closure)) {
    Py_INCREF(m->func);
    return m->func;
}

static PyObject *Method_doc(MethodObject *m, void *Py_UNUSED(closure)) {
    return PyObject_GetAttrString(m->func, "__doc__");
}

static PyGetSetDef Method_getset[] = {
    {"__wrapped__", (getter)Method_wrapped, NULL, "The Python function it stands in for.", NULL},
    {"__doc__", (getter)Method_doc, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject MethodType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "opaque_ops._fastcalls.Method",
    .tp_basicsize = sizeof(MethodObject),
    .tp_dealloc = (destructor)Method_dealloc,
    .tp_vectorcall_offset = offsetof(MethodObject, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_getattro = (getattrofunc)Method_getattro,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_traverse = (traverseproc)Method_traverse,
    .tp_clear = (inquiry)Method_clear,
    .tp_getset = Method_getset,
    .tp_descr_get = Method_get,
    .tp_new = Method_new,
};

/* ------------------------------------------------------- planned tensors */

/* TfLiteTensorGetAllocationStrategy; 4 is kTfLiteAllocationStrategyMalloc,
 * what a kTfLiteDynamic tensor reports (opaque_ops/_native/tflite_c.h). */
typedef int (*strategy_fn)(const void *tensor);
#define STRATEGY_DYNAMIC 4

/* planned_tensors(native, interpreter, (get_tensor, allocation_strategy))
 *
 * Why: after each allocation the model checks ask, for nearly every
 * operator output, whether TFLite planned its shape (the shape itself only
 * for a few tensors), and the interpreter asks whether any tensor is
 * dynamic.  Through cffi that is two C calls per tensor (over 500 on a model
 * of 250 tensors); here it is one call.  It returns a frozenset of ints and
 * a bool, and makes no object per tensor that the garbage collector tracks:
 * a first creation in a new process otherwise set off a full collection.
 *
 * The same C API calls as NativeInterpreter.is_planned and
 * has_dynamic_tensor (opaque_ops/_native/native_interpreter.py), which stay
 * the reference: tensors are visited from index 0 until
 * TfLiteInterpreterGetTensor returns NULL (the C API checks the index); a
 * tensor is planned unless its allocation strategy is 4, a dynamic tensor's.
 * Returns (frozenset of the planned indices, whether a tensor is dynamic).
 *
 * `native` is only held for the call: the caller's NativeInterpreter, which
 * owns the TfLiteInterpreter, so it cannot be freed while this runs.  The
 * caller holds the interpreter's call lock; no Python code runs meanwhile. */
static PyObject *planned_tensors(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *native;
    unsigned long long interp, fn[2];
    if (!PyArg_ParseTuple(args, "OK(KK):planned_tensors", &native, &interp, &fn[0], &fn[1])) return NULL;
    if (!addresses_ok("planned_tensors", interp, fn, 2)) return NULL;
    void *interpreter = (void *)(uintptr_t)interp;
    get_tensor_fn get_tensor = (get_tensor_fn)(uintptr_t)fn[0];
    strategy_fn strategy = (strategy_fn)(uintptr_t)fn[1];
    Py_INCREF(native); /* held for the call (see above) */
    PyObject *planned = PyFrozenSet_New(NULL);
    int dynamic = 0;
    if (planned == NULL) goto fail;
    for (int i = 0; i < INT32_MAX; i++) {
        void *t = get_tensor(interpreter, i);
        if (t == NULL) break;
        if (strategy(t) == STRATEGY_DYNAMIC) {
            dynamic = 1;
            continue;
        }
        PyObject *key = PyLong_FromLong(i);
        int bad = key == NULL || PySet_Add(planned, key) < 0; /* (a new frozenset may be filled so) */
        Py_XDECREF(key);
        if (bad) goto fail;
    }
    Py_DECREF(native);
    return Py_BuildValue("(NO)", planned, dynamic ? Py_True : Py_False);
fail:
    Py_XDECREF(planned);
    Py_DECREF(native);
    return NULL;
}

/* ---------------------------------------------------------------- module */

/* The compiled model reader (c/src/modelreader.c, compiled into this module). */
PyObject *opaque_ops_read_model(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

static PyMethodDef module_methods[] = {
    {"read_model", (PyCFunction)(void (*)(void))opaque_ops_read_model, METH_FASTCALL,
     "read_model(data, spec)\n--\n\nThe model's parts as opaque_ops.model.reader builds them, or None."},
    {"drop_moved_views", drop_moved_views_py, METH_VARARGS,
     "drop_moved_views(slots, native, interpreter, functions)\n--\n\nDrop each cached view whose tensor moved."},
    {"sigint_watch", opaque_ops_sigint_watch, METH_O,
     "sigint_watch(install)\n--\n\nOn the main thread: put the Ctrl-C guard in place (True if it is), or step aside."},
    {"sigint_decider", opaque_ops_sigint_decider, METH_O,
     "sigint_decider(callable)\n--\n\nWhat the main thread's first invoke calls to decide on the Ctrl-C guard."},
    {"invoke", (PyCFunction)(void (*)(void))opaque_ops_guarded_invoke, METH_FASTCALL,
     "invoke(function, argument, interpreter, cancel)\n--\n\nfunction(argument), the GIL released, Ctrl-C guarded."},
    {"planned_tensors", planned_tensors, METH_VARARGS,
     "planned_tensors(native, interpreter, functions)\n--\n\n(frozenset of the planned tensors, any dynamic tensor)."},
    {NULL, NULL, 0, NULL},
};

/* The CPython this module is built for, readable in the file without
 * importing it: importing a module built for another CPython runs its init
 * function against another ABI (object layouts, API functions), which may
 * crash rather than fail.  opaque_ops/_native/fast_calls.py finds this
 * string in the file and refuses a module built for another Python before
 * it imports one ("t": a free-threaded build, whose ABI differs too). */
#ifdef Py_GIL_DISABLED
#define OO_ABI_FLAGS "t"
#else
#define OO_ABI_FLAGS ""
#endif
__attribute__((used)) static const char built_for[] =
    "opaque_ops fast calls for CPython " Py_STRINGIFY(PY_MAJOR_VERSION) "." Py_STRINGIFY(PY_MINOR_VERSION) OO_ABI_FLAGS ";";

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastcalls", "opaque_ops' fast calls (c/src/fastcalls.c).", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fastcalls(void) {
    if (_import_array() < 0) return NULL;
    if (oo_sigint_init() != 0) {
        PyErr_SetString(PyExc_OSError, "the Ctrl-C guard's fork handler could not be registered");
        return NULL;
    }
    str_fast = PyUnicode_InternFromString("_fast");
    if (str_fast == NULL) return NULL;
    if (PyType_Ready(&LockType) < 0 || PyType_Ready(&CallsType) < 0 || PyType_Ready(&MethodType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&LockType);
    Py_INCREF(&CallsType);
    Py_INCREF(&MethodType);
    if (PyModule_AddObject(m, "Lock", (PyObject *)&LockType) < 0 ||
        PyModule_AddObject(m, "Calls", (PyObject *)&CallsType) < 0 ||
        PyModule_AddObject(m, "Method", (PyObject *)&MethodType) < 0 || PyModule_AddIntConstant(m, "ABI", 3) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
