/* The rank recorder of planaria.launch.rankfate, in C.
 *
 * It does what rankfate.py's main does: it runs the command as its only child, passes on the
 * signals sent to it alone (not those of the MPI runtime, its parent, which signals the whole
 * process group), writes $PLANARIA_FATES_DIR/<world rank>.json when the child starts and again
 * when it ends (exit code or signal), and ends the way its child did. It starts in well under a
 * millisecond of CPU, where an interpreter takes about ten, once per rank and before the rank.
 * rankfate.py builds it on first use with the system's C compiler and runs the Python recorder
 * where there is none.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STDIN_WAIT 10 /* seconds rank R waits for the launcher's end of the stdin pipe */

static const int FORWARDED[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT, SIGTSTP, SIGWINCH};

static int world_rank(void) {
    const char *names[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        char *end;
        long r;
        if (v == NULL || *v == '\0')
            continue;
        errno = 0;
        r = strtol(v, &end, 10);
        if (errno == 0 && *end == '\0' && r >= 0 && r < 1L << 30)
            return (int)r;
    }
    return -1;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int exec_command(char **argv) {
    execvp(argv[0], argv);
    fprintf(stderr, "planaria: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

static void on_alarm(int sig) { (void)sig; }

/* Make the launcher's named pipe fd 0 if $PLANARIA_STDIN ("<rank>:<host>:<path>") names this rank
 * and host; the blocking open (it waits for the launcher's end) is bounded by an alarm. */
static void take_stdin(int rank, const char *host) {
    const char *spec = getenv("PLANARIA_STDIN");
    char who[32];
    const char *colon, *path;
    size_t hostlen;
    struct sigaction sa, old;
    int fd;
    if (spec == NULL || rank < 0 || (colon = strchr(spec, ':')) == NULL)
        return;
    snprintf(who, sizeof who, "%d", rank);
    if ((size_t)(colon - spec) != strlen(who) || strncmp(spec, who, strlen(who)) != 0)
        return;
    spec = colon + 1;
    if ((path = strchr(spec, ':')) == NULL || path[1] == '\0')
        return;
    hostlen = (size_t)(path - spec);
    path++;
    if (hostlen != strlen(host) || strncmp(spec, host, hostlen) != 0)
        return;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm; /* no SA_RESTART: the alarm interrupts the open */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, &old);
    alarm(STDIN_WAIT);
    fd = open(path, O_RDONLY);
    alarm(0);
    sigaction(SIGALRM, &old, NULL);
    if (fd < 0) {
        fprintf(stderr, "planaria: rank %d: no standard input: the launcher did not open %s within %d s\n",
                rank, path, STDIN_WAIT);
        return;
    }
    dup2(fd, 0);
    close(fd);
}

/* Replace ``path`` with ``text`` atomically (no fsync: the record matters only while this machine is up). */
static void write_record(const char *path, const char *text) {
    char tmp[4096];
    size_t len = strlen(text), done = 0;
    int fd;
    if (snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid()) >= (int)sizeof tmp)
        return;
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0)
        return; /* the job directory is unreachable: run without a record */
    while (done < len) {
        ssize_t n = write(fd, text + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        done += (size_t)n;
    }
    close(fd);
    if (done == len)
        rename(tmp, path);
    else
        unlink(tmp);
}

/* The host name as the records write it: letters, digits and -_. kept, anything else '?'. */
static void json_host(const char *host, char *out, size_t size) {
    size_t i = 0;
    for (; *host != '\0' && i + 1 < size; host++, i++)
        out[i] = (isalnum((unsigned char)*host) || strchr("-_.", *host) != NULL) ? *host : '?';
    out[i] = '\0';
}

/* End as the child did: by its signal (no core file of our own), else with its exit code. */
static int end_like(int sig, int code, const sigset_t *before) {
    struct rlimit rl;
    if (sig == 0)
        return code;
    if (getrlimit(RLIMIT_CORE, &rl) == 0) {
        rl.rlim_cur = 0;
        setrlimit(RLIMIT_CORE, &rl);
    }
    signal(sig, SIG_DFL); /* SIGKILL and SIGSTOP cannot be caught: already default */
    sigprocmask(SIG_SETMASK, before, NULL);
    kill(getpid(), sig);
    sleep(1); /* a stopped or ignored signal: fall back to 128 + signal */
    return 128 + sig;
}

int main(int argc, char **argv) {
    const char *where = getenv("PLANARIA_FATES_DIR");
    struct utsname un;
    char path[4096], host[256], start[1024], text[1200];
    sigset_t waited, before;
    pid_t pid, parent = getpid();
    int rank = world_rank(), status = 0, sig = 0, code = 0;
    if (argc < 2) {
        fprintf(stderr, "planaria rankfate: no command\n");
        return 2;
    }
    if (uname(&un) != 0)
        strcpy(un.nodename, "?");
    take_stdin(rank, un.nodename);
    if (where == NULL || *where == '\0' || rank < 0)
        return exec_command(argv + 1);
    if (snprintf(path, sizeof path, "%s/%d.json", where, rank) >= (int)sizeof path)
        return exec_command(argv + 1);
    /* Signals are taken with sigwaitinfo, which tells who sent them: the MPI runtime (our parent)
     * signals the whole process group, the command included, so those are not passed on (a second
     * SIGTERM would cut short a command's own clean-up); anyone else's are. */
    sigemptyset(&waited);
    sigaddset(&waited, SIGCHLD);
    for (size_t i = 0; i < sizeof FORWARDED / sizeof FORWARDED[0]; i++)
        sigaddset(&waited, FORWARDED[i]);
    sigprocmask(SIG_BLOCK, &waited, &before);
    pid = fork();
    if (pid < 0) {
        fprintf(stderr, "planaria: cannot start %s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    if (pid == 0) {
        sigprocmask(SIG_SETMASK, &before, NULL);
        return exec_command(argv + 1);
    }
    json_host(un.nodename, host, sizeof host);
    snprintf(start, sizeof start, "{\"rank\": %d, \"host\": \"%s\", \"pid\": %d, \"shim\": %d, \"start\": %.6f",
             rank, host, (int)pid, (int)parent, now());
    snprintf(text, sizeof text, "%s}", start);
    write_record(path, text);
    for (;;) {
        siginfo_t info;
        pid_t done = waitpid(pid, &status, WNOHANG);
        if (done == pid)
            break;
        if (done < 0 && errno != EINTR)
            return 1; /* no such child any more: nothing left to record */
        if (sigwaitinfo(&waited, &info) < 0) /* a child that ends meanwhile leaves SIGCHLD pending */
            continue;
        if (info.si_signo != SIGCHLD && info.si_pid != getppid())
            kill(pid, info.si_signo); /* already ended: waitpid returns next */
    }
    if (WIFSIGNALED(status))
        sig = WTERMSIG(status);
    else
        code = WEXITSTATUS(status);
    if (sig != 0)
        snprintf(text, sizeof text, "%s, \"end\": %.6f, \"signal\": %d}", start, now(), sig);
    else
        snprintf(text, sizeof text, "%s, \"end\": %.6f, \"exit_code\": %d}", start, now(), code);
    /* the signals stayed blocked until the record was written: a late SIGTERM cannot cut it short */
    write_record(path, text);
    return end_like(sig, code, &before);
}
