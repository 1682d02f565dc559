/* isolate_helper.c -- loaded only by the isolated worker (python -m opaque_ops.isolate.server).
 *
 * Two jobs, both of which must run in C:
 *   1. a fatal-signal handler that prints a C backtrace (glibc's backtrace()
 *      and backtrace_symbols_fd() from execinfo.h) to fd 2, records the
 *      signal, the fault address and the node that was running in a crash
 *      record that lives in memory shared with the parent, wakes the parent,
 *      and then hands over to the previous handler (Python's faulthandler,
 *      which prints the Python side and lets the signal kill the process);
 *   2. a TFLite telemetry profiler whose op-begin/op-end callbacks keep the
 *      node being invoked, so the crash record can name it.  A Python
 *      callback would cost microseconds per op; these cost nanoseconds.
 *
 * Everything the signal handler calls is async-signal-safe, except
 * backtrace() itself, which is called once at install time so that its
 * lazy loading of libgcc_s happens outside the handler.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <execinfo.h>
#include <semaphore.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

/* Built through the kernels' build path (opaque_ops.build.compiler: cached, one
 * compiler setup), which links in the runtime glue; its entry points are
 * declared here.  The helper declares no ops. */
#include "opaque_ops.h"

#define OO_EXPORT __attribute__((visibility("default")))

/* The layout the parent reads with struct.unpack (opaque_ops/isolate/protocol.py,
 * CRASH_RECORD).  `stage` is written by the worker's Python code, the rest here. */
typedef struct {
  int32_t magic; /* OO_CRASH_MAGIC once a fatal signal was recorded */
  int32_t signo;
  int32_t code; /* si_code */
  int32_t node; /* -1: no op was being invoked */
  int32_t subgraph;
  int32_t stage;
  uint64_t addr; /* si_addr */
  char op[64];
} oo_crash_record;

#define OO_CRASH_MAGIC 0x4f4f4352 /* "OOCR" */

/* The telemetry profiler struct of TFLite 2.17 (tensorflow/lite/profiling/
 * telemetry/c/profiler.h; upstream marks it as not ABI-stable, so the worker
 * attaches it only to runtime versions it was checked against). */
typedef struct oo_telemetry_profiler {
  void* data;
  void (*report_event)(struct oo_telemetry_profiler*, const char*, uint64_t);
  void (*report_op_event)(struct oo_telemetry_profiler*, const char*, int64_t, int64_t, uint64_t);
  void (*report_settings)(struct oo_telemetry_profiler*, const char*, const void*);
  uint32_t (*begin_op)(struct oo_telemetry_profiler*, const char*, int64_t, int64_t);
  void (*end_op)(struct oo_telemetry_profiler*, uint32_t);
  void (*report_op_invoke)(struct oo_telemetry_profiler*, const char*, uint64_t, int64_t, int64_t);
} oo_telemetry_profiler;

/* Ops nest (a control-flow op invokes a subgraph), so keep a small stack. */
#define OO_STACK 32
static struct {
  const char* name;
  int32_t node, subgraph;
} oo_stack[OO_STACK];
static volatile int oo_depth;

static uint32_t oo_begin_op(oo_telemetry_profiler* p, const char* name, int64_t node, int64_t subgraph) {
  (void)p;
  int d = oo_depth;
  if (d < OO_STACK) {
    oo_stack[d].name = name;
    oo_stack[d].node = (int32_t)node;
    oo_stack[d].subgraph = (int32_t)subgraph;
  }
  oo_depth = d + 1;
  return (uint32_t)(d + 1);
}

static void oo_end_op(oo_telemetry_profiler* p, uint32_t handle) {
  (void)p;
  /* The handle is the depth after the matching begin. */
  oo_depth = handle > 0 ? (int)handle - 1 : 0;
}

/* Every callback must be set: TFLite calls them without checking for NULL. */
static void oo_ignore_event(oo_telemetry_profiler* p, const char* n, uint64_t s) { (void)p, (void)n, (void)s; }
static void oo_ignore_op_event(oo_telemetry_profiler* p, const char* n, int64_t a, int64_t b, uint64_t s) {
  (void)p, (void)n, (void)a, (void)b, (void)s;
}
static void oo_ignore_settings(oo_telemetry_profiler* p, const char* n, const void* s) { (void)p, (void)n, (void)s; }
static void oo_ignore_op_invoke(oo_telemetry_profiler* p, const char* n, uint64_t t, int64_t a, int64_t b) {
  (void)p, (void)n, (void)t, (void)a, (void)b;
}

static oo_telemetry_profiler oo_profiler = {
    NULL, oo_ignore_event, oo_ignore_op_event, oo_ignore_settings, oo_begin_op, oo_end_op, oo_ignore_op_invoke,
};

OO_EXPORT void* OoIsolate_Profiler(void) { return &oo_profiler; }

/* Reset between interpreters hosted by the same worker. */
OO_EXPORT void OoIsolate_ResetProfiler(void) { oo_depth = 0; }

/* ---------------------------------------------------------------- crashes */

static oo_crash_record* oo_record;
static sem_t* oo_wake;
static const int oo_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS};
#define OO_NSIG (sizeof oo_signals / sizeof oo_signals[0])
static struct sigaction oo_previous[OO_NSIG];

static void oo_write(const char* s) {
  size_t n = strlen(s);
  while (n > 0) {
    ssize_t w = write(2, s, n);
    if (w <= 0) return;
    s += w;
    n -= (size_t)w;
  }
}

static void oo_write_num(uint64_t v, int base) {
  char buf[32];
  int i = (int)sizeof buf - 1;
  buf[i] = '\0';
  do {
    buf[--i] = "0123456789abcdef"[v % (uint64_t)base];
    v /= (uint64_t)base;
  } while (v && i > 0);
  if (base == 16) {
    buf[--i] = 'x';
    buf[--i] = '0';
  }
  oo_write(buf + i);
}

/* "<prefix>N (OpName)" for the node being invoked, if any. */
static void oo_write_node(const char* prefix) {
  int d = oo_depth;
  if (d <= 0 || d > OO_STACK) return;
  oo_write(prefix);
  oo_write_num((uint64_t)(uint32_t)oo_stack[d - 1].node, 10);
  if (oo_stack[d - 1].name != NULL) {
    oo_write(" (");
    oo_write(oo_stack[d - 1].name);
    oo_write(")");
  }
}

/* The instruction the signal interrupted. */
static void* oo_pc(void* uctx) {
#if defined(__x86_64__)
  return uctx ? (void*)((ucontext_t*)uctx)->uc_mcontext.gregs[REG_RIP] : NULL;
#elif defined(__aarch64__)
  return uctx ? (void*)((ucontext_t*)uctx)->uc_mcontext.pc : NULL;
#else
  (void)uctx;
  return NULL;
#endif
}

/* Print the stack from the interrupted instruction down: the handler's own
 * frames and the kernel's signal trampoline are left out when the
 * interrupted PC is found among the frames. */
static void oo_backtrace(void* uctx) {
  void* frames[64];
  int n = backtrace(frames, 64);
  int first = 0;
  void* pc = oo_pc(uctx);
  for (int i = 0; pc != NULL && i < n; ++i) {
    if (frames[i] == pc) {
      first = i;
      break;
    }
  }
  oo_write("C backtrace (most recent call first):\n");
  backtrace_symbols_fd(frames + first, n - first, 2);
  oo_write("end of C backtrace\n");
}

static volatile sig_atomic_t oo_in_fatal;

/* Hand a signal to the handler installed before ours. */
static void oo_call_previous(const struct sigaction* prev, int sig, siginfo_t* info, void* uctx) {
  if ((prev->sa_flags & SA_SIGINFO) && prev->sa_sigaction != NULL) {
    prev->sa_sigaction(sig, info, uctx);
  } else if (prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN) {
    prev->sa_handler(sig);
  }
}

static void oo_on_fatal(int sig, siginfo_t* info, void* uctx) {
  size_t k;
  int d = oo_depth;
  if (oo_in_fatal) { /* a second fault while reporting the first: just die */
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  oo_in_fatal = 1;
  if (oo_record != NULL) {
    oo_record->signo = sig;
    oo_record->code = info ? info->si_code : 0;
    oo_record->addr = info ? (uint64_t)(uintptr_t)info->si_addr : 0;
    oo_record->node = -1;
    oo_record->subgraph = -1;
    oo_record->op[0] = '\0';
    if (d > 0 && d <= OO_STACK) {
      oo_record->node = oo_stack[d - 1].node;
      oo_record->subgraph = oo_stack[d - 1].subgraph;
      if (oo_stack[d - 1].name != NULL) {
        for (k = 0; k < sizeof oo_record->op - 1 && oo_stack[d - 1].name[k]; ++k) oo_record->op[k] = oo_stack[d - 1].name[k];
        oo_record->op[k] = '\0';
      }
    }
    oo_record->magic = OO_CRASH_MAGIC;
  }
  oo_write("\nopaque_ops isolated worker: fatal signal ");
  oo_write_num((uint64_t)sig, 10);
  if (info != NULL && (sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL)) {
    oo_write(" at address ");
    oo_write_num((uint64_t)(uintptr_t)info->si_addr, 16);
  }
  oo_write_node(" while invoking node ");
  oo_write("\n");
  oo_backtrace(uctx);
  /* Wake the parent now; it waits for this process to exit before reading
   * the rest of stderr. */
  if (oo_wake != NULL) sem_post(oo_wake);

  for (k = 0; k < OO_NSIG; ++k) {
    if (oo_signals[k] != sig) continue;
    /* Restore the previous handler first: if it returns, re-raising below
     * must reach it (or the default action), not this function again. */
    sigaction(sig, &oo_previous[k], NULL);
    oo_call_previous(&oo_previous[k], sig, info, uctx);
    break;
  }
  /* faulthandler restores the default action and re-raises; in case the
   * previous handler was something else, make sure the signal is fatal. */
  signal(sig, SIG_DFL);
  raise(sig);
}

/* SIGUSR1: print where the process is (the parent asks before killing a
 * child that overran its timeout), then let the previous handler (Python's
 * faulthandler) print the Python stacks.  Not fatal. */
static struct sigaction oo_previous_where;

static void oo_on_where(int sig, siginfo_t* info, void* uctx) {
  oo_write("\nopaque_ops isolated worker: still running");
  oo_write_node(" node ");
  oo_write(" when its time ran out\n");
  oo_backtrace(uctx);
  oo_call_previous(&oo_previous_where, sig, info, uctx);
}

/* Install the handlers.  `record` points into the shared control page,
 * `wake` at the semaphore the parent waits on.  Python's faulthandler must
 * be set up first (fatal signals, and SIGUSR1 with chain=False): these
 * handlers print first and then call it.  Returns 0, or -1 if a sigaction
 * call failed. */
OO_EXPORT int OoIsolate_Install(void* record, void* wake) {
  size_t k;
  void* warm[4];
  struct sigaction sa;
  oo_record = (oo_crash_record*)record;
  oo_wake = (sem_t*)wake;
  backtrace(warm, 4); /* loads libgcc_s now, not inside the handler */

  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  /* SA_ONSTACK: faulthandler gives the main thread an alternate stack, so a
   * stack overflow in a kernel still gets its backtrace. */
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sa.sa_sigaction = oo_on_fatal;
  for (k = 0; k < OO_NSIG; ++k) {
    if (sigaction(oo_signals[k], &sa, &oo_previous[k]) != 0) return -1;
  }
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  sa.sa_sigaction = oo_on_where;
  if (sigaction(SIGUSR1, &sa, &oo_previous_where) != 0) return -1;
  return 0;
}
