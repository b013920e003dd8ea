/* Preloaded into a bench (bench/cpu_mask.py): every CPUID the process executes is answered
 * here with the AVX-512, VNNI, BF16 and AMX bits cleared, so torch, fbgemm, oneDNN and ONNX
 * Runtime's MLAS all pick the kernels they would run on an AVX2-only CPU (AMD Zen 2/3,
 * Intel Haswell to Comet Lake).
 *
 * How: Linux can make CPUID fault in a process (arch_prctl(ARCH_SET_CPUID, 0), on CPUs
 * listing `cpuid_fault` in /proc/cpuinfo; the setting is inherited by threads and children
 * created after it). The fault arrives as SIGSEGV with si_code SI_KERNEL at the CPUID
 * instruction (0F A2); the handler lets CPUID run for itself, clears the bits, writes the
 * four registers into the interrupted context and steps over the instruction. The handler
 * has to stay installed: sigaction() and signal() for SIGSEGV are wrapped here, so a
 * handler the program installs (Python's faulthandler, pytest's) is recorded and called for
 * every other SIGSEGV, and a real crash still crashes the way it would have.
 *
 * Bits cleared (Intel SDM vol. 2A, CPUID leaf 07H; AMD APM vol. 3, appendix E):
 *   leaf 7.0 EBX: AVX512F 16, DQ 17, IFMA 21, PF 26, ER 27, CD 28, BW 30, VL 31
 *   leaf 7.0 ECX: AVX512_VBMI 1, VBMI2 6, VNNI 11, BITALG 12, VPOPCNTDQ 14
 *   leaf 7.0 EDX: 4VNNIW 2, 4FMAPS 3, VP2INTERSECT 8, AMX-BF16 22, AVX512_FP16 23,
 *                 AMX-TILE 24, AMX-INT8 25
 *   leaf 7.1 EAX: AVX-VNNI 4, AVX512_BF16 5, AVX-IFMA 23
 * XGETBV still reports the ZMM state enabled; libraries ask for both, so the CPUID bits
 * decide. Not a kernel: nothing here computes anything a bench measures. */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <cpuid.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);

static volatile unsigned long answered;
static sigaction_fn real_sigaction;
static struct sigaction program_action; /* the program's SIGSEGV action, SIG_DFL at first */

static void hide(unsigned leaf, unsigned sub, unsigned *a, unsigned *b, unsigned *c,
                 unsigned *d) {
  if (leaf == 7 && sub == 0) {
    *b &= ~((1u << 16) | (1u << 17) | (1u << 21) | (1u << 26) | (1u << 27) | (1u << 28) |
            (1u << 30) | (1u << 31));
    *c &= ~((1u << 1) | (1u << 6) | (1u << 11) | (1u << 12) | (1u << 14));
    *d &= ~((1u << 2) | (1u << 3) | (1u << 8) | (1u << 22) | (1u << 23) | (1u << 24) |
            (1u << 25));
  } else if (leaf == 7 && sub == 1) {
    *a &= ~((1u << 4) | (1u << 5) | (1u << 23));
  }
}

static void on_segv(int sig, siginfo_t *info, void *context) {
  greg_t *regs = ((ucontext_t *)context)->uc_mcontext.gregs;
  const unsigned char *ip = (const unsigned char *)regs[REG_RIP];
  if (info->si_code == SI_KERNEL && ip[0] == 0x0f && ip[1] == 0xa2) {
    unsigned leaf = (unsigned)regs[REG_RAX], sub = (unsigned)regs[REG_RCX], a, b, c, d;
    syscall(SYS_arch_prctl, ARCH_SET_CPUID, 1);
    __cpuid_count(leaf, sub, a, b, c, d);
    syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0);
    hide(leaf, sub, &a, &b, &c, &d);
    regs[REG_RAX] = a;
    regs[REG_RBX] = b;
    regs[REG_RCX] = c;
    regs[REG_RDX] = d;
    regs[REG_RIP] += 2;
    answered++;
    return;
  }
  /* Not a CPUID: what the program asked for. */
  if (program_action.sa_flags & SA_SIGINFO) {
    program_action.sa_sigaction(sig, info, context);
  } else if (program_action.sa_handler != SIG_DFL && program_action.sa_handler != SIG_IGN) {
    program_action.sa_handler(sig);
  } else {
    struct sigaction fallback;
    memset(&fallback, 0, sizeof fallback);
    fallback.sa_handler = SIG_DFL;
    real_sigaction(SIGSEGV, &fallback, NULL); /* returning re-runs the fault: it crashes */
  }
}

static int install(void) {
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_sigaction = on_segv;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  return real_sigaction(SIGSEGV, &action, NULL);
}

/* The program's view of SIGSEGV: its own action, ours stays underneath. */
int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
  if (!real_sigaction) real_sigaction = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
  if (sig != SIGSEGV) return real_sigaction(sig, act, old);
  if (old) *old = program_action;
  if (act) program_action = *act;
  return 0;
}

sighandler_t signal(int sig, sighandler_t handler) {
  struct sigaction act, old;
  memset(&act, 0, sizeof act);
  act.sa_handler = handler;
  act.sa_flags = SA_RESTART;
  sigemptyset(&act.sa_mask);
  if (sigaction(sig, &act, &old) != 0) return SIG_ERR;
  return (old.sa_flags & SA_SIGINFO) ? (sighandler_t)old.sa_sigaction : old.sa_handler;
}

__attribute__((constructor)) static void start(void) {
  real_sigaction = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
  memset(&program_action, 0, sizeof program_action);
  program_action.sa_handler = SIG_DFL;
  if (!real_sigaction || install() != 0 || syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0) != 0) {
    fprintf(stderr, "cpuid_mask: this CPU or kernel cannot make CPUID fault "
                    "(no cpuid_fault in /proc/cpuinfo?)\n");
    _exit(3);
  }
}

__attribute__((destructor)) static void stop(void) {
  if (getenv("CPUID_MASK_VERBOSE"))
    fprintf(stderr, "cpuid_mask: answered %lu CPUID instructions\n", answered);
}
