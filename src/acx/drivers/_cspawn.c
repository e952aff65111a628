/* acx.drivers._cspawn: start a command in its own session, optionally inside a cgroup v2, with
 * vfork + execve — what subprocess.Popen(start_new_session=True) does, plus one step Python cannot
 * take without a helper process: the child joins the session's cgroup (writes "0" to its
 * cgroup.procs) between vfork and execve, so the command is inside before it can fork anything.
 *
 * Why C: subprocess runs no code between fork and exec except through preexec_fn, which forbids
 * vfork (a full fork of the acx process: ~2 ms of page-table copying) and runs Python in the child.
 * The alternative, a /bin/sh wrapper that joins the cgroup and execs the command, costs a whole
 * extra exec per command (~0.7 ms CPU). Measurements: docs/running.md, "Overhead".
 *
 * Built at install time when a C compiler is present (setup.py, optional); without it acx uses the
 * /bin/sh wrapper (acx.drivers._procs.FAST_SPAWN is False). Linux only.
 *
 * The child runs only async-signal-safe system calls on memory the parent prepared before vfork:
 * reset signal handlers, setsid, join the cgroup, wire stdin/stdout/stderr, chdir, close every
 * other descriptor, execve. A failing step stores (step, errno) in memory the parent reads once
 * vfork returns (the child shares its memory until it execs or exits) and exits 127; the parent
 * reaps it and raises OSError with the path of the step that failed.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

enum { STEP_NONE = 0, STEP_CGROUP, STEP_DEVNULL, STEP_FDS, STEP_CWD, STEP_EXEC };

struct failure {
    volatile int step;
    volatile int err;
};

static void close_from_3(void) {
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 3U, ~0U, 0U) == 0)
        return;
#endif
    /* No close_range (kernel < 5.9, or a seccomp filter): close what the limit allows. Python's own
     * descriptors are close-on-exec anyway (PEP 446). */
    struct rlimit lim;
    long top = 65536;
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY && (long)lim.rlim_cur < top)
        top = (long)lim.rlim_cur;
    for (long fd = 3; fd < top; fd++)
        close((int)fd);
}

/* fd as the child's descriptor `target` (0, 1, 2), inheritable across execve. */
static int wire(int fd, int target) {
    if (fd == target) {
        int flags = fcntl(fd, F_GETFD);
        return flags < 0 ? -1 : fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC);
    }
    return dup2(fd, target) < 0 ? -1 : 0;
}

static void __attribute__((noreturn)) child(const char *exe, char *const argv[], char *const envp[], const char *cwd, int in, int out,
                  int err, const char *procs, const sigset_t *mask, struct failure *f) {
    int step = STEP_NONE;
    /* Handlers installed by Python (or a library) must not run in the child — it shares the
     * parent's memory — and must not survive exec; SIGPIPE/SIGXFSZ go back to the default
     * Python's start-up changed (as subprocess's restore_signals does). */
    for (int sig = 1; sig < NSIG; sig++) {
        struct sigaction sa;
        if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &sa) != 0)
            continue;
        if (sa.sa_handler != SIG_DFL && (sa.sa_handler != SIG_IGN || sig == SIGPIPE || sig == SIGXFSZ)) {
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = SIG_DFL;
            sigaction(sig, &sa, NULL);
        }
    }
    sigprocmask(SIG_SETMASK, mask, NULL);
    setsid();
    if (procs != NULL) {
        step = STEP_CGROUP;
        int fd = open(procs, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, "0", 1) != 1)
            goto fail;
        close(fd);
    }
    if (in < 0) {
        step = STEP_DEVNULL;
        in = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (in < 0)
            goto fail;
    }
    step = STEP_FDS;
    /* Move sources out of 0..2 first so wiring one target never clobbers another's source. */
    if (out >= 0 && out < 1 && (out = fcntl(out, F_DUPFD_CLOEXEC, 3)) < 0)
        goto fail;
    if (err >= 0 && err < 2 && (err = fcntl(err, F_DUPFD_CLOEXEC, 3)) < 0)
        goto fail;
    if (wire(in, 0) < 0 || (out >= 0 && wire(out, 1) < 0) || (err >= 0 && wire(err, 2) < 0))
        goto fail;
    if (cwd != NULL) {
        step = STEP_CWD;
        if (chdir(cwd) < 0)
            goto fail;
    }
    close_from_3();
    step = STEP_EXEC;
    execve(exe, argv, envp);
fail:
    f->err = errno;
    f->step = step;
    _exit(127);
}

/* vfork in a frame of its own that the child never returns from: the child's stack use (it runs on
 * ours until execve) cannot clobber the caller's variables. Signals stay blocked across vfork: no
 * handler may run in the child while it shares our memory (child() resets them, then unblocks). */
static pid_t __attribute__((noinline)) start(const char *exe, char *const argv[], char *const envp[],
                                             const char *cwd, int in, int out, int err, const char *procs,
                                             struct failure *f, int *fork_errno) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = vfork();
    if (pid == 0)
        child(exe, argv, envp, cwd, in, out, err, procs, &old, f);
    *fork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return pid;
}

/* A NULL-terminated array of the bytes objects in `seq` (borrowed buffers), or NULL with an error set. */
static char **c_strings(PyObject *seq, const char *what) {
    PyObject *fast = PySequence_Fast(seq, what);
    if (fast == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    char **out = PyMem_Calloc((size_t)n + 1, sizeof(char *));
    if (out == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyBytes_Check(item)) {
            PyErr_Format(PyExc_TypeError, "%s: expected bytes, got %.100s", what, Py_TYPE(item)->tp_name);
            goto error;
        }
        if (PyBytes_AsStringAndSize(item, &out[i], NULL) < 0) /* ValueError on an embedded NUL */
            goto error;
    }
    Py_DECREF(fast); /* the items stay alive: `seq` holds them */
    return out;
error:
    Py_DECREF(fast);
    PyMem_Free(out);
    return NULL;
}

/* The NUL-free bytes `obj` as a C string (borrowed), or NULL with an error set. */
static const char *bytes_path(PyObject *obj, const char *what) {
    char *out;
    if (!PyBytes_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: expected bytes or None, got %.100s", what, Py_TYPE(obj)->tp_name);
        return NULL;
    }
    return PyBytes_AsStringAndSize(obj, &out, NULL) < 0 ? NULL : out;
}

PyDoc_STRVAR(spawn_doc,
             "spawn(executable, argv, env, cwd, stdin, stdout, stderr, cgroup_procs) -> pid\n\n"
             "Start `executable` (an absolute or relative path: no PATH search) with `argv` and `env`\n"
             "(lists of bytes, env entries b'NAME=value') in its own session, working directory `cwd`\n"
             "(bytes or None), descriptors `stdin`/`stdout`/`stderr` as 0/1/2 (stdin -1: /dev/null;\n"
             "stdout/stderr -1: inherited), every other descriptor closed. `cgroup_procs` (bytes or\n"
             "None): the cgroup.procs file the child writes itself into before execve. Returns the pid\n"
             "once the child has exec'd; raises OSError (filename: the cgroup.procs file, the cwd or\n"
             "the executable) when a step fails, after reaping the child.");

static PyObject *spawn(PyObject *Py_UNUSED(self), PyObject *args) {
    const char *exe, *cwd = NULL, *procs = NULL;
    PyObject *argv_obj, *env_obj, *cwd_obj, *procs_obj;
    int in, out, err;
    if (!PyArg_ParseTuple(args, "yOOOiiiO", &exe, &argv_obj, &env_obj, &cwd_obj, &in, &out, &err, &procs_obj))
        return NULL;
    if ((cwd_obj != Py_None && (cwd = bytes_path(cwd_obj, "cwd")) == NULL) ||
        (procs_obj != Py_None && (procs = bytes_path(procs_obj, "cgroup_procs")) == NULL))
        return NULL;
    char **argv = c_strings(argv_obj, "argv");
    if (argv == NULL)
        return NULL;
    char **envp = c_strings(env_obj, "env");
    if (envp == NULL) {
        PyMem_Free(argv);
        return NULL;
    }
    struct failure f = {STEP_NONE, 0};
    int fork_errno = 0;
    pid_t pid;
    /* The GIL is released while the child execs: other threads may run, this one waits. */
    Py_BEGIN_ALLOW_THREADS
    pid = start(exe, argv, envp, cwd, in, out, err, procs, &f, &fork_errno);
    Py_END_ALLOW_THREADS
    PyMem_Free(argv);
    PyMem_Free(envp);
    if (pid < 0) {
        errno = fork_errno;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (f.step != STEP_NONE) {
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        errno = f.err;
        const char *where = f.step == STEP_CGROUP ? procs
                            : f.step == STEP_DEVNULL ? "/dev/null"
                            : f.step == STEP_CWD     ? cwd
                            : f.step == STEP_EXEC    ? exe
                                                     : NULL;
        if (where == NULL)
            return PyErr_SetFromErrno(PyExc_OSError);
        PyObject *name = PyUnicode_DecodeFSDefault(where);
        if (name == NULL)
            return NULL;
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, name);
        Py_DECREF(name);
        return NULL;
    }
    return PyLong_FromLong((long)pid);
}

static PyMethodDef methods[] = {
    {"spawn", spawn, METH_VARARGS, spawn_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "acx.drivers._cspawn", "vfork + execve into a session (and cgroup); see _procs.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__cspawn(void) { return PyModule_Create(&module); }
