/* report.c - the outputs of ferry-bench: a table, the ratios against their targets, a JSON
 * document, and gnuplot charts. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define MAX_SERIES 32
#define MAX_TICS 32

const struct bench_result *bench_find(const struct bench_result *r, size_t n, const char *system,
                                      const char *op, uint64_t size)
{
    for (size_t i = 0; i < n; i++)
        if (r[i].size == size && strcmp(r[i].system, system) == 0 && strcmp(r[i].op, op) == 0)
            return &r[i];
    return NULL;
}

double bench_metric(const struct bench_result *r, enum bench_metric m)
{
    switch (m) {
    case BENCH_OPS_PER_SEC:
        return r->ops_per_sec;
    case BENCH_P50_US:
        return r->p50_us;
    case BENCH_MIB_PER_SEC:
        return r->mib_per_sec;
    case BENCH_MEDIAN_MIB_PER_SEC:
        return r->p50_us > 0 ? (double)r->size / r->p50_us * 1e6 / (1024.0 * 1024.0) : 0;
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void bench_ratio_over_rounds(struct bench_ratio *q, const struct bench_set *set,
                             bench_round_value value, const void *arg)
{
    double v[BENCH_MAX_ROUNDS];
    unsigned n = set->nrounds;
    q->measured = 0;
    q->rounds = n;
    for (unsigned k = 0; k < n; k++) {
        v[k] = value(&set->rounds[k * set->n], set->n, arg);
        if (!(v[k] > 0))
            return;
    }
    qsort(v, n, sizeof(v[0]), cmp_double);
    q->measured = 1;
    q->value = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    q->lo = v[0];
    q->hi = v[n - 1];
    bench_ratio_judge(q);
}

/* The value of a bench_ratio_def within one round. */
static double def_value(const struct bench_result *r, size_t n, const void *arg)
{
    const struct bench_ratio_def *d = arg;
    const struct bench_result *num = bench_find(r, n, d->num_system, d->num_op, d->num_size);
    const struct bench_result *den = bench_find(r, n, d->den_system, d->den_op, d->den_size);
    if (num == NULL || den == NULL || bench_metric(den, d->metric) <= 0)
        return 0;
    return bench_metric(num, d->metric) / bench_metric(den, d->metric);
}

struct bench_ratio bench_ratio_of(const struct bench_ratio_def *d, const struct bench_set *set)
{
    struct bench_ratio q = {.name = d->name,
                            .description = d->description,
                            .target = d->target,
                            .at_most = d->at_most,
                            .limit = d->limit};
    bench_ratio_over_rounds(&q, set, def_value, d);
    return q;
}

void bench_ratio_judge(struct bench_ratio *q)
{
    q->met = q->at_most ? q->value <= q->target : q->value >= q->target;
}

/* The widths of the system and op columns: the longest name, and at least the 7 and 9 of
 * the local suite's names. */
static void column_widths(const struct bench_result *r, size_t n, int *system, int *op)
{
    *system = 7;
    *op = 9;
    for (size_t i = 0; i < n; i++) {
        if ((int)strlen(r[i].system) > *system)
            *system = (int)strlen(r[i].system);
        if ((int)strlen(r[i].op) > *op)
            *op = (int)strlen(r[i].op);
    }
}

void bench_print_table(FILE *f, const struct bench_result *r, size_t n)
{
    char label[32];
    int ws, wo;
    column_widths(r, n, &ws, &wo);
    fprintf(
        f,
        "Rates are over the summed time of the timed operations (untimed set-up, such as\n"
        "deleting what a put stored, excluded); latencies are per operation (CLOCK_MONOTONIC);\n"
        "MiB/s = size x ops/s in 2^20-byte MiB; sizes in bytes, K/M/G = 2^10/2^20/2^30.\n"
        "Each figure is the median over %u interleaved rounds; IQR is the interquartile\n"
        "range of the rounds' ops/s over their median (noisy: above %.0f %%).\n\n",
        n ? r[0].rounds : 0, BENCH_NOISY * 100);
    /* µ takes two bytes but one column: the header is spelled out, not printf-padded. */
    fprintf(f, "%-*s %-*s %6s", ws, "system", wo, "op", "size");
    fputs("         ops/s      p50 µs      p99 µs          MiB/s    IQR  iterations\n", f);
    for (size_t i = 0; i < n; i++) {
        bench_size_label(r[i].size, label, sizeof(label));
        fprintf(f, "%-*s %-*s %6s %13.1f %11.2f %11.2f %14.1f %5.0f%% %11llu%s\n", ws, r[i].system,
                wo, r[i].op, label, r[i].ops_per_sec, r[i].p50_us, r[i].p99_us, r[i].mib_per_sec,
                r[i].spread * 100, (unsigned long long)r[i].iterations,
                r[i].noisy ? "  noisy" : "");
    }
}

void bench_print_ratios(FILE *f, const struct bench_ratio *q, size_t n)
{
    int w = 46;
    char range[48];
    if (n == 0)
        return;
    for (size_t i = 0; i < n; i++)
        if ((int)strlen(q[i].description) > w)
            w = (int)strlen(q[i].description);
    fputs("\nratios (issue targets; the median of the ratios within each round, their range):\n",
          f);
    for (size_t i = 0; i < n; i++) {
        const char *cmp = q[i].at_most ? "<=" : ">=";
        if (!q[i].measured) {
            fprintf(f,
                    "  %-*s %10s   target %s %-5g not measured (size or system not in this run)\n",
                    w, q[i].description, "-", cmp, q[i].target);
            continue;
        }
        range[0] = '\0';
        if (q[i].rounds > 1)
            snprintf(range, sizeof(range), " (%.3f-%.3f)", q[i].lo, q[i].hi);
        fprintf(f, "  %-*s %10.3f%-15s target %s %-5g %s\n", w, q[i].description, q[i].value, range,
                cmp, q[i].target, q[i].met ? "met" : "MISSED");
        if (!q[i].met && q[i].limit)
            fprintf(f, "  %-*s why, most likely: %s\n", w, "", q[i].limit);
    }
}

/* One ratio as a JSON object; value, range and met are null when it was not measured. */
static void print_json_ratio(FILE *f, const struct bench_ratio *q)
{
    char value[32], lo[32], hi[32];
    if (q->measured) {
        snprintf(value, sizeof(value), "%.4f", q->value);
        snprintf(lo, sizeof(lo), "%.4f", q->rounds > 1 ? q->lo : q->value);
        snprintf(hi, sizeof(hi), "%.4f", q->rounds > 1 ? q->hi : q->value);
    } else {
        strcpy(value, "null");
        strcpy(lo, "null");
        strcpy(hi, "null");
    }
    fprintf(f,
            "{\"name\":\"%s\",\"value\":%s,\"min\":%s,\"max\":%s,\"rounds\":%u,"
            "\"target\":%g,\"comparison\":\"%s\",\"met\":%s}",
            q->name, value, lo, hi, q->rounds, q->target, q->at_most ? "<=" : ">=",
            !q->measured ? "null"
            : q->met     ? "true"
                         : "false");
}

/* The range of ratio i's medians over the comparisons; returns how many were measured. */
static unsigned stability_of(const struct bench_ratio *q, size_t nq, unsigned repeat, size_t i,
                             double *lo, double *hi, unsigned *met)
{
    unsigned m = 0;
    *met = 0;
    for (unsigned k = 0; k < repeat; k++) {
        const struct bench_ratio *x = &q[k * nq + i];
        if (!x->measured)
            continue;
        *lo = m == 0 || x->value < *lo ? x->value : *lo;
        *hi = m == 0 || x->value > *hi ? x->value : *hi;
        *met += (unsigned)x->met;
        m++;
    }
    return m;
}

static void print_stability(FILE *f, const struct bench_ratio *q, size_t nq, unsigned repeat)
{
    int w = 46;
    double lo, hi;
    unsigned met;
    for (size_t i = 0; i < nq; i++)
        if ((int)strlen(q[i].description) > w)
            w = (int)strlen(q[i].description);
    fprintf(f, "\nstability over %u comparisons (each ratio's median in each; met in how many):\n",
            repeat);
    for (size_t i = 0; i < nq; i++) {
        unsigned m = stability_of(q, nq, repeat, i, &lo, &hi, &met);
        fprintf(f, "  %-*s", w, q[i].description);
        for (unsigned k = 0; k < repeat; k++) {
            const struct bench_ratio *x = &q[k * nq + i];
            if (x->measured)
                fprintf(f, " %7.3f", x->value);
            else
                fprintf(f, " %7s", "-");
        }
        if (m > 0)
            fprintf(f, "   spread %4.0f %%, met %u of %u\n", lo > 0 ? (hi - lo) / lo * 100 : 0, met,
                    m);
        else
            fputs("   not measured\n", f);
    }
}

static void print_json_stability(FILE *f, const struct bench_ratio *q, size_t nq, unsigned repeat)
{
    double lo = 0, hi = 0;
    unsigned met;
    fputs(",\n\"stability\":[", f);
    for (size_t i = 0; i < nq; i++) {
        unsigned m = stability_of(q, nq, repeat, i, &lo, &hi, &met);
        fprintf(f, "%s\n  {\"name\":\"%s\",\"comparisons\":%u,\"measured\":%u,\"met\":%u,",
                i ? "," : "", q[i].name, repeat, m, met);
        if (m > 0)
            fprintf(f, "\"min\":%.4f,\"max\":%.4f,\"values\":[", lo, hi);
        else
            fputs("\"min\":null,\"max\":null,\"values\":[", f);
        for (unsigned k = 0; k < repeat; k++) {
            const struct bench_ratio *x = &q[k * nq + i];
            if (x->measured)
                fprintf(f, "%s%.4f", k ? "," : "", x->value);
            else
                fprintf(f, "%snull", k ? "," : "");
        }
        fputs("]}", f);
    }
    fputs("]", f);
}

static void print_json(FILE *f, const struct bench_report *rep)
{
    const struct bench_result *r = rep->results;
    fprintf(f, "{\"suite\":\"%s\",\"rounds\":%u,\"seconds_per_slice\":%g,\"seed\":%llu,",
            rep->suite, rep->opts->rounds, rep->opts->seconds, (unsigned long long)rep->opts->seed);
    fputs("\"results\":[", f);
    for (size_t i = 0; i < rep->nresults; i++)
        fprintf(f,
                "%s\n  {\"system\":\"%s\",\"op\":\"%s\",\"size\":%llu,\"ops_per_sec\":%.1f,"
                "\"p50_us\":%.3f,\"p99_us\":%.3f,\"mib_per_sec\":%.3f,\"iterations\":%llu,"
                "\"rounds\":%u,\"iqr_relative\":%.4f,\"noisy\":%s}",
                i ? "," : "", r[i].system, r[i].op, (unsigned long long)r[i].size, r[i].ops_per_sec,
                r[i].p50_us, r[i].p99_us, r[i].mib_per_sec, (unsigned long long)r[i].iterations,
                r[i].rounds, r[i].spread, r[i].noisy ? "true" : "false");
    fputs("],\n\"ratios\":[", f);
    for (size_t i = 0; i < rep->nratios; i++) {
        fputs(i ? ",\n  " : "\n  ", f);
        print_json_ratio(f, &rep->ratios[i]);
    }
    fputs("]", f);
    if (rep->all_ratios != NULL)
        print_json_stability(f, rep->all_ratios, rep->nratios, rep->opts->repeat);
    fputs("}\n", f);
}

void bench_require_gnuplot(void)
{
    if (bench_which("gnuplot") == NULL)
        bench_fail("--plot needs gnuplot, which is not on $PATH (Debian: apt-get install "
                   "gnuplot-nox)");
}

/* The distinct (system, op) pairs of r in order of appearance: index of each first result. */
static size_t find_series(const struct bench_result *r, size_t n, size_t *first)
{
    size_t ns = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        while (k < ns && (strcmp(r[first[k]].system, r[i].system) != 0 ||
                          strcmp(r[first[k]].op, r[i].op) != 0))
            k++;
        if (k == ns && ns < MAX_SERIES)
            first[ns++] = i;
    }
    return ns;
}

static FILE *open_in(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        bench_fail("cannot write %s: %s", path, strerror(errno));
    return f;
}

static void close_checked(FILE *f, const char *what)
{
    if (ferror(f) | fclose(f))
        bench_fail("writing %s failed", what);
}

/* Replaces the characters of s that a file name had better not hold (':' and ';' of
 * "ferry-fabric:tcp;ofi_rxm") with '_'. */
static void file_safe(char *s)
{
    for (; *s; s++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.+-_", *s))
            *s = '_';
}

static void series_file(char *buf, size_t len, const char *suite, const char *system,
                        const char *op)
{
    snprintf(buf, len, "%s-%s-%s.dat", suite, system, op);
    file_safe(buf);
}

static void write_series(const char *dir, const char *suite, const struct bench_result *r, size_t n,
                         const struct bench_result *s)
{
    char name[256];
    series_file(name, sizeof(name), suite, s->system, s->op);
    FILE *f = open_in(dir, name);
    fprintf(f, "# %s %s:%s\n# size_bytes ops_per_sec p50_us p99_us mib_per_sec\n", suite, s->system,
            s->op);
    for (size_t i = 0; i < n; i++)
        if (strcmp(r[i].system, s->system) == 0 && strcmp(r[i].op, s->op) == 0)
            fprintf(f, "%llu %.1f %.3f %.3f %.3f\n", (unsigned long long)r[i].size,
                    r[i].ops_per_sec, r[i].p50_us, r[i].p99_us, r[i].mib_per_sec);
    close_checked(f, name);
}

/* set xtics with a label at every measured size. */
static void write_xtics(FILE *f, const struct bench_result *r, size_t n)
{
    uint64_t tics[MAX_TICS];
    size_t nt = 0;
    char label[32];
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        while (k < nt && tics[k] != r[i].size)
            k++;
        if (k == nt && nt < MAX_TICS)
            tics[nt++] = r[i].size;
    }
    fputs("set xtics (", f);
    for (size_t k = 0; k < nt; k++) {
        bench_size_label(tics[k], label, sizeof(label));
        fprintf(f, "%s\"%s\" %llu", k ? ", " : "", label, (unsigned long long)tics[k]);
    }
    fputs(")\n", f);
}

/* One line of a plot command: the series file's column (a number, or a gnuplot expression in
 * parentheses) against size, titled as given (names such as tcp;ofi_rxm are not markup). */
static void write_line(FILE *f, int first, const char *suite, const char *system, const char *op,
                       const char *column, const char *title)
{
    char name[256];
    series_file(name, sizeof(name), suite, system, op);
    fprintf(f, "%s\"%s\" using 1:%s with linespoints lw 2 title \"%s\" noenhanced",
            first ? "plot " : ", \\\n  ", name, column, title);
}

static void write_plot(FILE *f, const char *suite, const struct bench_result *r,
                       const size_t *first, size_t ns, const char *column)
{
    char title[256];
    for (size_t k = 0; k < ns; k++) {
        const struct bench_result *s = &r[first[k]];
        snprintf(title, sizeof(title), "%s:%s", s->system, s->op);
        write_line(f, k == 0, suite, s->system, s->op, column, title);
    }
    fputs("\n", f);
}

/* Opens dir/<name>.gp with the settings every chart shares: a PNG terminal, log-log axes,
 * and a tic at every size measured. */
static FILE *open_script(const char *dir, const char *suite, const char *name,
                         const struct bench_result *r, size_t n)
{
    char file[256];
    snprintf(file, sizeof(file), "%s.gp", name);
    FILE *f = open_in(dir, file);
    fprintf(f, "# ferry-bench %s charts; run `gnuplot %s` in this directory.\n", suite, file);
    fputs("if (strstrt(GPVAL_TERMINALS, \"pngcairo\") > 0) {\n"
          "    set terminal pngcairo size 1000,650\n"
          "} else {\n"
          "    set terminal png size 1000,650\n"
          "}\n"
          "set logscale xy\nset format y \"10^{%L}\"\nset grid\nset key outside right\nset xlabel "
          "\"object size\"\n",
          f);
    write_xtics(f, r, n);
    return f;
}

static void write_script(const char *dir, const char *suite, const struct bench_result *r, size_t n,
                         const size_t *first, size_t ns)
{
    char name[128];
    snprintf(name, sizeof(name), "%s.gp", suite);
    FILE *f = open_script(dir, suite, suite, r, n);
    fprintf(f, "set output \"%s-throughput.png\"\n", suite);
    fprintf(f, "set title \"ferry-bench %s: throughput (MiB = 2^{20} bytes)\"\n", suite);
    fputs("set ylabel \"MiB/s\"\n", f);
    write_plot(f, suite, r, first, ns, "5");
    fprintf(f, "set output \"%s-latency.png\"\n", suite);
    fprintf(f, "set title \"ferry-bench %s: median latency per operation\"\n", suite);
    fputs("set ylabel \"p50 latency (µs)\"\n", f);
    write_plot(f, suite, r, first, ns, "3");
    close_checked(f, name);
}

/* Runs `gnuplot <name>.gp` in dir and waits for it. */
static void run_gnuplot(const char *dir, const char *name)
{
    char script[256];
    int status;
    snprintf(script, sizeof(script), "%s.gp", name);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        bench_fail("fork for gnuplot: %s", strerror(errno));
    if (pid == 0) {
        if (chdir(dir) == 0)
            execlp("gnuplot", "gnuplot", script, (char *)NULL);
        fprintf(stderr, "ferry-bench: gnuplot in %s: %s\n", dir, strerror(errno));
        _exit(127);
    }
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        bench_fail("gnuplot failed on %s/%s", dir, script);
}

void bench_plot(const char *dir, const char *suite, const struct bench_result *r, size_t n,
                int (*charted)(const struct bench_result *r))
{
    size_t first[MAX_SERIES], nc = 0;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        bench_fail("mkdir %s: %s", dir, strerror(errno));
    size_t ns = find_series(r, n, first);
    for (size_t k = 0; k < ns; k++) {
        write_series(dir, suite, r, n, &r[first[k]]);
        if (charted == NULL || charted(&r[first[k]]))
            first[nc++] = first[k];
    }
    write_script(dir, suite, r, n, first, nc);
    run_gnuplot(dir, suite);
    fprintf(stderr, "ferry-bench: wrote %s/%s-throughput.png and %s/%s-latency.png\n", dir, suite,
            dir, suite);
}

/* 1 when r holds a result of (system, op) at any size. */
static int measured(const struct bench_result *r, size_t n, const char *system, const char *op)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(r[i].system, system) == 0 && strcmp(r[i].op, op) == 0)
            return 1;
    return 0;
}

void bench_plot_lines(const char *dir, const char *suite, const char *name, const char *title,
                      const struct bench_result *r, size_t n, const struct bench_series *s,
                      size_t ns)
{
    char safe[256];
    int lines = 0;
    snprintf(safe, sizeof(safe), "%s", name);
    file_safe(safe);
    FILE *f = open_script(dir, suite, safe, r, n);
    fprintf(f, "set output \"%s.png\"\nset title \"%s\" noenhanced\n", safe, title);
    fputs("set ylabel \"median MiB/s (size / p50; MiB = 2^{20} bytes)\"\n", f);
    for (size_t k = 0; k < ns; k++)
        if (measured(r, n, s[k].system, s[k].op))
            write_line(f, lines++ == 0, suite, s[k].system, s[k].op, "($1 / $3 * 1e6 / 1048576)",
                       s[k].title);
    fputs("\n", f);
    close_checked(f, safe);
    if (lines == 0)
        bench_fail("nothing measured for the chart %s", safe);
    run_gnuplot(dir, safe);
    fprintf(stderr, "ferry-bench: wrote %s/%s.png\n", dir, safe);
}

void bench_report(const struct bench_report *rep)
{
    FILE *text = rep->opts->json ? stderr : stdout;
    fprintf(text, "%u interleaved rounds of %g s slices, seed %llu%s\n", rep->opts->rounds,
            rep->opts->seconds, (unsigned long long)rep->opts->seed,
            rep->opts->repeat > 1 ? "; the tables are of the last comparison" : "");
    if (rep->preamble != NULL)
        fputs(rep->preamble, text);
    bench_print_table(text, rep->results, rep->nresults);
    if (rep->notes != NULL)
        fputs(rep->notes, text);
    bench_print_ratios(text, rep->ratios, rep->nratios);
    if (rep->all_ratios != NULL && rep->opts->repeat > 1)
        print_stability(text, rep->all_ratios, rep->nratios, rep->opts->repeat);
    if (rep->opts->json)
        print_json(stdout, rep);
    fflush(stdout);
    if (rep->opts->plot_dir != NULL)
        bench_plot(rep->opts->plot_dir, rep->suite, rep->results, rep->nresults, rep->charted);
}
