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
 * - oo_sigint_watch() puts our handler in front of the one SIGINT has (the
 *   Python interpreter's own C handler, which trips the KeyboardInterrupt),
 *   and our handler calls that one after it has cancelled.  So Python still
 *   sees every SIGINT as before; the guard only adds the cancel.  Called from
 *   the main thread's armed invokes (sigint.py), which is also when it comes
 *   back if an application replaced the handler since (signal.signal does).
 *   It never replaces SIG_DFL or SIG_IGN: a process that dies or ignores
 *   Ctrl-C keeps doing so.
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
static atomic_int busy;       /* handlers between their read of target and their cancel's end */
static atomic_int chaining;   /* a handler is calling the one it replaced (a cycle guard) */
static atomic_int installed;  /* our handler was put in place at least once */
static struct sigaction chained; /* the handler ours replaced, called after the cancel */
static pthread_t main_thread;    /* set with the handler, from the main thread */

static void handler(int sig, siginfo_t *info, void *context) {
    int saved_errno = errno;
    atomic_fetch_add(&busy, 1);
    oo_sigint_job *job = atomic_load(&target);
    if (job != NULL) job->cancel(job->interpreter);
    atomic_fetch_sub(&busy, 1);
    /* A C handler installed after ours that calls ours in turn (a library's
     * chaining handler), once watch() has put ours in front of it again,
     * would call itself through `chained` for ever: the second entry
     * returns.  Python's handler is then reached only if that library's
     * handler calls it some other way; Python's own signal.signal() never
     * chains, so the usual case (an application's handler replacing ours,
     * ours put back in front of it) keeps every call. */
    if (!atomic_exchange(&chaining, 1)) {
        if (chained.sa_flags & SA_SIGINFO)
            chained.sa_sigaction(sig, info, context);
        else if (chained.sa_handler != SIG_DFL && chained.sa_handler != SIG_IGN)
            chained.sa_handler(sig);
        atomic_store(&chaining, 0);
    }
    errno = saved_errno;
}

static int is_ours(const struct sigaction *sa) {
    return (sa->sa_flags & SA_SIGINFO) && sa->sa_sigaction == handler;
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
    atomic_store(&chaining, 0);
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

/* watch(): put the handler in place if SIGINT has a handler function to
 * chain to.  True if Ctrl-C now cancels the main thread's invokes. */
PyObject *opaque_ops_sigint_watch(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(noargs)) {
    if (_PyOS_IsMainThread == NULL || !_PyOS_IsMainThread()) Py_RETURN_FALSE;
    struct sigaction current;
    if (sigaction(SIGINT, NULL, &current) != 0) return PyErr_SetFromErrno(PyExc_OSError);
    if (is_ours(&current)) {
        main_thread = pthread_self();
        Py_RETURN_TRUE;
    }
    if (!(current.sa_flags & SA_SIGINFO) && (current.sa_handler == SIG_DFL || current.sa_handler == SIG_IGN))
        Py_RETURN_FALSE;
    /* Not in place, so no handler of ours reads `chained` now (but for one
     * that started before an application replaced ours and still runs on
     * another thread: a window of a few instructions, on a second SIGINT). */
    chained = current;
    struct sigaction ours = current; /* the same mask and flags (SA_ONSTACK, ...), as SA_SIGINFO */
    ours.sa_sigaction = handler;
    ours.sa_flags = current.sa_flags | SA_SIGINFO;
    main_thread = pthread_self();
    if (sigaction(SIGINT, &ours, NULL) != 0) return PyErr_SetFromErrno(PyExc_OSError);
    atomic_store(&installed, 1);
    Py_RETURN_TRUE;
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
    oo_sigint_job job = {(void *)(uintptr_t)a[2], (oo_status_fn)(uintptr_t)a[3]}, *prev = NULL;
    int guarded = oo_sigint_enter(&job, &prev);
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = fn((void *)(uintptr_t)a[1]);
    Py_END_ALLOW_THREADS
    if (guarded) oo_sigint_leave(prev);
    return PyLong_FromLong(status);
}
