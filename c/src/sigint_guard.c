/*
 * opaque_ops' Ctrl-C guard: SIGINT during an invoke on the main thread
 * cancels that invoke, at no cost to an invoke when no signal comes.
 *
 * Why: CPython runs a Python signal handler only between bytecodes, so a
 * KeyboardInterrupt waits until TfLiteInterpreterInvoke returns, which, for
 * a large model, may be seconds.  TFLite stops an invoke between two nodes
 * when TfLiteInterpreterCancel is called on its interpreter (cancellation is
 * enabled on every interpreter opaque_ops creates).  The Python watcher in
 * opaque_ops/interpreter/sigint.py does that from a thread it starts for one
 * invoke, at about 0.1 ms, so it watches only some invokes.  This file does
 * it from the signal itself:
 *
 * - watch() puts our handler in front of the one SIGINT has (the Python
 *   interpreter's own C handler, which trips the KeyboardInterrupt), and our
 *   handler calls that one after it has cancelled.  So Python still sees
 *   every SIGINT as before; the guard only adds the cancel.  Python decides
 *   when (opaque_ops/interpreter/sigint.py): on the main thread, while
 *   Ctrl-C means KeyboardInterrupt (Python's default handler), at the first
 *   invoke after each allocation, and at the main thread's first invoke
 *   (oo_sigint_decide).  Later it goes back only in front of the handler it
 *   first replaced (an application's signal.signal() put Python's back);
 *   in front of another handler, which may call ours in turn (faulthandler's
 *   does), it steps aside.  It never replaces SIG_DFL or SIG_IGN.
 * - An invoke on the main thread marks its interpreter as the target for
 *   its duration (oo_sigint_enter / oo_sigint_leave: two atomic stores).  On
 *   another thread it marks nothing: CPython delivers KeyboardInterrupt to
 *   the main thread only, so a Ctrl-C must not stop another thread's work.
 *
 * Signal safety: the handler does atomic loads and stores and calls
 * TfLiteInterpreterCancel, which clears an atomic flag in the interpreter.
 * It may run on any thread, so an interpreter must not be freed while a
 * handler is about to cancel it: the handler counts itself busy before it
 * reads the target, and oo_sigint_leave clears the target and then waits
 * until no handler is busy (a few instructions, only when one runs).  With
 * sequentially consistent atomics a handler that read the target before it
 * was cleared is counted busy, and one that counts itself after the wait
 * reads no target.
 *
 * _PyOS_IsMainThread is CPython's own test (exported since 3.x; declared in
 * intrcheck.h up to 3.12 and in an internal header in 3.13).  It is taken
 * as a weak symbol: where a CPython does not export it, the guard stays off
 * and the Python watcher serves as before.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

extern int _PyOS_IsMainThread(void) __attribute__((weak));

typedef int (*oo_status_fn)(void *);

/* What the handler cancels: the interpreter and the runtime's TfLiteInterpreterCancel.
 * It lives in the frame of the call that set it, until oo_sigint_leave returns.
 * (fastcalls.c declares the same struct and the two functions it calls.) */
typedef struct oo_sigint_job {
    void *interpreter;
    oo_status_fn cancel;
} oo_sigint_job;

static _Atomic(oo_sigint_job *) target;
static atomic_int busy;              /* handlers between their read of target and their cancel's end */
static atomic_ulong chaining_thread; /* the thread calling `chained` (0: none): a cycle guard */
static atomic_int installed;         /* our handler was put in place at least once */
/* The handler ours replaced the first time, called after the cancel.  Set
 * once: ours goes back in front of that handler only (see watch()), never in
 * front of another one, which may itself call ours (faulthandler's does). */
static struct sigaction chained;
static pthread_t main_thread; /* set by watch(), on the main thread */
/* Written with the GIL held: the main thread has decided once, through
 * watch(); until then, its first invoke asks the decider (a Python callable). */
static int decided;
static PyObject *decider;

static void handler(int sig, siginfo_t *info, void *context) {
    int saved_errno = errno;
    atomic_fetch_add(&busy, 1);
    oo_sigint_job *job = atomic_load(&target);
    if (job != NULL) job->cancel(job->interpreter);
    atomic_fetch_sub(&busy, 1);
    /* A handler that calls ours again while ours calls it (on this thread)
     * would go round for ever: that second entry only cancels.  Two threads
     * handling a SIGINT each at once both chain (only one is recorded). */
    unsigned long me = (unsigned long)pthread_self(), none = 0;
    if (atomic_load(&chaining_thread) != me) {
        int mine = atomic_compare_exchange_strong(&chaining_thread, &none, me);
        if (chained.sa_flags & SA_SIGINFO)
            chained.sa_sigaction(sig, info, context);
        else if (chained.sa_handler != SIG_DFL && chained.sa_handler != SIG_IGN)
            chained.sa_handler(sig);
        if (mine) atomic_store(&chaining_thread, 0);
    }
    errno = saved_errno;
}

static int is_ours(const struct sigaction *sa) {
    return (sa->sa_flags & SA_SIGINFO) && sa->sa_sigaction == handler;
}

static int same_handler(const struct sigaction *a, const struct sigaction *b) {
    if ((a->sa_flags & SA_SIGINFO) != (b->sa_flags & SA_SIGINFO)) return 0;
    return (a->sa_flags & SA_SIGINFO) ? a->sa_sigaction == b->sa_sigaction : a->sa_handler == b->sa_handler;
}

/* 1 if this invoke is guarded (call oo_sigint_leave(*prev) after it), 0 if not.
 * The caller holds the GIL; installed and main_thread change only under it. */
int oo_sigint_enter(oo_sigint_job *job, oo_sigint_job **prev) {
    if (job->cancel == NULL || !atomic_load_explicit(&installed, memory_order_relaxed) ||
        !pthread_equal(pthread_self(), main_thread))
        return 0;
    /* An invoke inside an invoke (a Python op's) guards its own run, then
     * gives the target back to the outer one. */
    *prev = atomic_exchange(&target, job);
    return 1;
}

void oo_sigint_leave(oo_sigint_job *prev) {
    atomic_store(&target, prev);
    while (atomic_load(&busy) != 0) {
        /* A handler on another thread is cancelling: it ends in a few instructions. */
    }
}

/* In a child made by fork() (os.fork runs the pthread_atfork handlers), only
 * the forking thread lives on, and CPython makes it the main thread: a
 * handler that was running on another thread at the fork never ends there,
 * so its busy count would make the child's next guarded invoke wait for
 * ever, and a target set by another thread's invoke is not the child's. */
static void after_fork_in_child(void) {
    atomic_store(&busy, 0);
    atomic_store(&chaining_thread, 0);
    atomic_store(&target, NULL);
    main_thread = pthread_self();
}

/* Called at the module's import (once per loaded copy of this file). */
int oo_sigint_init(void) {
    static int registered;
    if (registered) return 0;
    int err = pthread_atfork(NULL, NULL, after_fork_in_child);
    registered = err == 0;
    return err;
}

/* watch(install): called on the main thread, where Python decides (sigint.py):
 * install true when Ctrl-C means KeyboardInterrupt there (Python's default
 * SIGINT handler).  Puts our handler in front of the one SIGINT has, the
 * first time (if it has a handler function), and later only in front of that
 * same handler (an application's signal.signal() puts Python's back).  True
 * if Ctrl-C now cancels the main thread's invokes; False, and the guard
 * steps aside, when install is false, off the main thread, when SIGINT is
 * SIG_DFL or SIG_IGN, or when another handler took it since. */
PyObject *opaque_ops_sigint_watch(PyObject *Py_UNUSED(module), PyObject *arg) {
    int install = PyObject_IsTrue(arg);
    if (install < 0) return NULL;
    if (_PyOS_IsMainThread == NULL || !_PyOS_IsMainThread()) Py_RETURN_FALSE;
    decided = 1;
    main_thread = pthread_self();
    if (!install) Py_RETURN_FALSE;
    struct sigaction current;
    if (sigaction(SIGINT, NULL, &current) != 0) return PyErr_SetFromErrno(PyExc_OSError);
    if (is_ours(&current)) Py_RETURN_TRUE;
    if (atomic_load(&installed)) {
        if (!same_handler(&current, &chained)) Py_RETURN_FALSE;
    } else {
        if (!(current.sa_flags & SA_SIGINFO) && (current.sa_handler == SIG_DFL || current.sa_handler == SIG_IGN))
            Py_RETURN_FALSE;
        chained = current; /* before ours is in place: no handler of ours reads it yet */
    }
    /* The same mask and flags as the handler it goes in front of (Python's
     * has SA_ONSTACK and no SA_RESTART, so that a blocking call returns to
     * Python, which runs its handler), as SA_SIGINFO; without SA_NODEFER and
     * SA_RESETHAND, which would let it run inside itself or only once. */
    struct sigaction ours = current;
    ours.sa_sigaction = handler;
    ours.sa_flags = (current.sa_flags & ~(SA_NODEFER | SA_RESETHAND)) | SA_SIGINFO;
    if (sigaction(SIGINT, &ours, NULL) != 0) return PyErr_SetFromErrno(PyExc_OSError);
    atomic_store(&installed, 1);
    Py_RETURN_TRUE;
}

/* sigint_decider(callable): what the main thread's first invoke calls while
 * it has not decided (see oo_sigint_decide). */
PyObject *opaque_ops_sigint_decider(PyObject *Py_UNUSED(module), PyObject *callable) {
    if (!PyCallable_Check(callable)) {
        PyErr_SetString(PyExc_TypeError, "sigint_decider() takes a callable");
        return NULL;
    }
    Py_INCREF(callable);
    Py_XSETREF(decider, callable);
    Py_RETURN_NONE;
}

/* Before an invoke, with the GIL: on the main thread, until it has decided,
 * ask the decider (which calls watch()).  An interpreter whose first invokes
 * ran on another thread gets its main-thread invokes guarded this way.
 * 0, or -1 with the decider's exception set. */
int oo_sigint_decide(void) {
    if (decided || decider == NULL || _PyOS_IsMainThread == NULL || !_PyOS_IsMainThread()) return 0;
    PyObject *r = PyObject_CallObject(decider, NULL);
    if (r == NULL) return -1;
    Py_DECREF(r);
    decided = 1;
    return 0;
}

/* invoke(function, argument, interpreter, cancel) -> status: function(argument)
 * with the GIL released, guarded as above with interpreter and cancel (cancel 0:
 * unguarded).  All four are addresses: TfLiteInterpreterInvoke and its
 * interpreter, or TfLiteSignatureRunnerInvoke and a runner of interpreter.
 * The caller keeps them alive for the call (NativeInterpreter does). */
PyObject *opaque_ops_guarded_invoke(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "invoke() takes 4 arguments (function, argument, interpreter, cancel)");
        return NULL;
    }
    unsigned long long a[4];
    for (int i = 0; i < 4; i++) {
        a[i] = PyLong_AsUnsignedLongLong(args[i]);
        if (a[i] == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    }
    if (a[0] == 0 || a[1] == 0 || a[2] == 0) {
        PyErr_SetString(PyExc_ValueError, "invoke(): a null interpreter or function");
        return NULL;
    }
    oo_status_fn fn = (oo_status_fn)(uintptr_t)a[0];
    if (oo_sigint_decide() < 0) return NULL;
    oo_sigint_job job = {(void *)(uintptr_t)a[2], (oo_status_fn)(uintptr_t)a[3]}, *prev = NULL;
    int guarded = oo_sigint_enter(&job, &prev);
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = fn((void *)(uintptr_t)a[1]);
    Py_END_ALLOW_THREADS
    if (guarded) oo_sigint_leave(prev);
    return PyLong_FromLong(status);
}
