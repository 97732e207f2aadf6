/*
 * dir_events.c - the events stream (cluster-wide deletes: every node reads what the others
 * add, every EVENTS_MS while up, from where it stopped, across reconnections, and from the start
 * again when the stream was made anew) and leaving the
 * cluster (the node entry, then the holdings, before a deadline).
 */
#include "directory/directory_int.h"

/* Whether a delete event is taken. Without a secret, every one (the cluster is open). With
 * one, only an event signed with it (else unsigned_events), later than the last taken from
 * its node's run and not from before this run began (else stale_events): a genuine event
 * copied into the stream again, or one from before this node's time, deletes nothing. */
static int event_trusted(struct directory *d, const struct dir_event *e, uint64_t t)
{
    char expect[DIR_SIG_HEX], run[sizeof(e->node) + sizeof(e->inc)];
    ferry_id key;
    uint64_t *last;

    if (!d->secret_len)
        return 1;
    if (dir_event_sign(d, e, expect) < 0 || !dir_sig_matches(expect, e->sig)) {
        dir_distrust(d, DISTRUST_EVENT, &d->counters.unsigned_events,
                     "a delete event for id %s (naming node %s) is not signed with our cluster "
                     "secret: ignored",
                     e->id, e->node);
        return 0;
    }
    snprintf(run, sizeof(run), "%s %s", e->node, e->inc);
    dir_node_cache_key(run, &key);
    last = idmap_get(&d->emitters, &key);
    if ((last && t <= *last) || t + EVENTS_SKEW_MS < (d->self.inc >> 12)) {
        dir_distrust(d, DISTRUST_STALE, &d->counters.stale_events,
                     "a signed delete event for id %s by node %s is not later than what was "
                     "taken from that node's run, or is from before this run: refused as a replay",
                     e->id, e->node);
        return 0;
    }
    if (!last) {
        if (d->emitters.count >= EMITTERS_MAX)
            dir_cache_clear(&d->emitters);
        if ((last = malloc(sizeof(*last))) && idmap_put(&d->emitters, &key, last) < 0) {
            free(last);
            last = NULL;
        }
    }
    if (last)
        *last = t;
    return 1;
}

/* The fields of one stream entry ([id, [field, value, ...]]) that matter: a delete by another
 * incarnation than this one, if trusted, is kept for the owner. */
static void take_entry(struct directory *d, const redisReply *e)
{
    const redisReply *f;
    struct dir_event ev = {.type = ""};
    struct heard *h = &d->heard[d->nheard];
    uint64_t t = 0;

    if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
        !dir_string_copy(d->events_last, sizeof(d->events_last), e->element[0]))
        return;
    memset(h, 0, sizeof(*h));
    f = e->element[1];
    for (size_t i = 0; f->type == REDIS_REPLY_ARRAY && i + 1 < f->elements; i += 2) {
        const redisReply *k = f->element[i], *v = f->element[i + 1];
        if (k->type != REDIS_REPLY_STRING)
            continue;
        if (strcmp(k->str, "type") == 0)
            (void)dir_string_copy(ev.type, sizeof(ev.type), v);
        else if (strcmp(k->str, "id") == 0)
            (void)dir_string_copy(ev.id, sizeof(ev.id), v);
        else if (strcmp(k->str, "node") == 0)
            (void)dir_string_copy(ev.node, sizeof(ev.node), v);
        else if (strcmp(k->str, "inc") == 0)
            (void)dir_string_copy(ev.inc, sizeof(ev.inc), v);
        else if (strcmp(k->str, "t") == 0 && dir_reply_u64(v, 10, &t))
            (void)dir_string_copy(ev.t, sizeof(ev.t), v);
        else if (strcmp(k->str, "root") == 0)
            (void)dir_string_copy(ev.root, sizeof(ev.root), v);
        else if (strcmp(k->str, "sig") == 0)
            (void)dir_string_copy(ev.sig, sizeof(ev.sig), v);
        else if (strcmp(k->str, "gen") == 0 && !dir_string_copy(ev.gen, sizeof(ev.gen), v))
            snprintf(ev.gen, sizeof(ev.gen), "?"); /* fails the signature, names no put */
    }
    if (strcmp(ev.type, "del") != 0 ||
        (strcmp(ev.node, d->self.id) == 0 && strcmp(ev.inc, d->inc_text) == 0) ||
        !event_trusted(d, &ev, t) || ferry_id_parse(ev.id, &h->id) != 0)
        return;
    /* an event without a root (an open cluster's older nodes) names no content: it drops no
     * copy */
    (void)digest_parse(ev.root, strlen(ev.root), h->root);
    memcpy(h->node, ev.node, sizeof(h->node));
    if (dir_gen_valid(ev.gen)) /* an event without one (an earlier version's) names no put */
        memcpy(h->gen, ev.gen, sizeof(h->gen));
    d->nheard++;
    d->counters.deletes_heard++;
}

/* A read of the stream failed: a key of the wrong type in its place is replaced (the next
 * delete makes the stream again), anything else counted. */
static void events_failed(struct directory *d, const char *what, const redisReply *rep)
{
    if (dir_wrongtype(rep))
        dir_fix_key(d, EVENTS_KEY, "stream");
    else
        dir_command_failed(d, what, dir_reply_why(rep));
}

/* A stream entry id "MS-SEQ" as two numbers: 1, or 0 when it is not one. */
static int stream_id_parse(const char *text, uint64_t *ms, uint64_t *seq)
{
    char *end;

    errno = 0;
    *ms = strtoull(text, &end, 10);
    if (errno || end == text || *end != '-')
        return 0;
    text = end + 1;
    *seq = strtoull(text, &end, 10);
    return !errno && end != text && *end == '\0';
}

/* Whether stream id a is below b (an id that is not one is below anything). */
static int stream_id_below(const char *a, const char *b)
{
    uint64_t ams, aseq, bms, bseq;

    if (!stream_id_parse(a, &ams, &aseq))
        return 1;
    if (!stream_id_parse(b, &bms, &bseq))
        return 0;
    return ams < bms || (ams == bms && aseq < bseq);
}

static void on_events_start(redisAsyncContext *ac, void *reply, void *priv);

/* Nothing new: at most every EVENTS_CHECK_MS, ask for the stream's last entry, to find out
 * whether the stream was made anew below the cursor (on_events_start, priv set). */
static void events_check(struct directory *d)
{
    const char *argv[] = {"XREVRANGE", EVENTS_KEY, "+", "-", "COUNT", "1"};
    uint64_t now = loop_now_ms();

    if (now < d->events_checked_ms + EVENTS_CHECK_MS || d->heard)
        return;
    d->events_checked_ms = now;
    d->events_reading = dir_send_command(d, on_events_start, d, 6, argv) == 0;
}

/* The reply to XREAD: [[stream, [entry, ...]]], or nil when nothing is new. */
static void on_events(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);
    const redisReply *rep = reply, *entries = NULL;
    size_t n;

    d->events_reading = 0;
    if (!rep)
        return;
    if (rep->type == REDIS_REPLY_NIL) {
        events_check(d);
        return;
    }
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 &&
        rep->element[0]->type == REDIS_REPLY_ARRAY && rep->element[0]->elements == 2)
        entries = rep->element[0]->element[1];
    if (!entries || entries->type != REDIS_REPLY_ARRAY) {
        events_failed(d, "XREAD", rep);
        return;
    }
    n = entries->elements < EVENTS_BATCH_N ? entries->elements : EVENTS_BATCH_N;
    if (!n || !(d->heard = calloc(n, sizeof(*d->heard))))
        return;
    for (size_t i = 0; i < n; i++)
        take_entry(d, entries->element[i]);
    if (n == EVENTS_BATCH_N) /* behind: read on without waiting */
        dir_arm(d, &d->events, loop_now_ms());
    dir_turn_soon(d);
}

/* The reply to XREVRANGE ... COUNT 1: the stream's last entry. At the first read (priv NULL),
 * where this run starts reading (older deletes were before its time). At a check (priv set),
 * a last entry below the cursor, or none, means the stream was deleted or made anew (its ids
 * start again, or someone added an entry far in the future and deleted it): what it holds now
 * came after, so reading starts again from 0-0 (each event still passes event_trusted), and
 * the rewind is counted with the bad keys and logged. (An entry with an id in the future is
 * followed: Redis numbers every entry added after it above it, genuine ones included.) */
static void on_events_start(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);
    const redisReply *rep = reply;
    char last[sizeof(d->events_last)] = "0-0";

    d->events_reading = 0;
    if (!rep)
        return;
    if (rep->type != REDIS_REPLY_ARRAY) {
        events_failed(d, "XREVRANGE", rep);
        return;
    }
    if (rep->elements > 0 && rep->element[0]->type == REDIS_REPLY_ARRAY &&
        rep->element[0]->elements >= 1)
        (void)dir_string_copy(last, sizeof(last), rep->element[0]->element[0]);
    if (!priv) {
        memcpy(d->events_last, last, sizeof(last));
    } else if (stream_id_below(last, d->events_last) && strcmp(d->events_last, "0-0") != 0) {
        dir_distrust(d, DISTRUST_KEY, &d->counters.bad_keys,
                     "the events stream ends at %s, below where this node read up to (%s): it "
                     "was deleted or made anew; reading it again from its start",
                     last, d->events_last);
        snprintf(d->events_last, sizeof(d->events_last), "0-0");
    }
}

/* Reads what was added since the last read; the first read of the run asks where to start. */
static void events_read(struct directory *d)
{
    const char *first[] = {"XREVRANGE", EVENTS_KEY, "+", "-", "COUNT", "1"};
    const char *next[] = {"XREAD", "COUNT", EVENTS_BATCH, "STREAMS", EVENTS_KEY, d->events_last};
    int rc;

    if (d->events_reading || d->heard || !d->up)
        return;
    if (!d->events_last[0])
        rc = dir_send_command(d, on_events_start, NULL, 6, first);
    else
        rc = dir_send_command(d, on_events, NULL, 6, next);
    d->events_reading = rc == 0;
}

void dir_on_events_timer(struct loop *l, struct loop_timer *t)
{
    struct directory *d = t->arg;

    if (!d->up)
        return;
    events_read(d);
    dir_arm(d, t, loop_now_ms() + EVENTS_MS);
}

void dir_events_start(struct directory *d)
{
    d->events_reading = 0;
    d->events_checked_ms = 0;
    dir_arm(d, &d->events, loop_now_ms());
}

/* Whether a delete heard is of another put than this node's copy of its id: it names a put,
 * and this node's copy is of a known other one (a later put, even of the same bytes). Counted
 * and logged. */
static int of_another_put(struct directory *d, const struct heard *h)
{
    char hex[HEX_ID_MAX];

    if (!h->gen[0] || !dir_gen_other(d, &h->id, h->gen))
        return 0;
    d->counters.deletes_of_earlier_puts++;
    ferry_id_format(&h->id, hex);
    log_info("directory: a delete of id %s by node %s was of its put %s; the copy here is of "
             "another, later put: it stays",
             hex, h->node, h->gen);
    return 1;
}

/* Gives the owner the deletes read (from the turn), but those of another put than this node's
 * copy. */
void dir_events_deliver(struct directory *d)
{
    struct heard *h = d->heard;
    size_t n = d->nheard;

    d->heard = NULL;
    d->nheard = 0;
    for (size_t i = 0; i < n; i++) {
        if (of_another_put(d, &h[i]))
            continue;
        free(idmap_remove(&d->holders, &h[i].id)); /* its holders and content are history */
        if (d->hooks.deleted)
            d->hooks.deleted(d->hooks.ctx, &h[i].id, h[i].root, h[i].node);
    }
    free(h);
}

/* ---- leaving ---- */

static void on_leave_cleanup(redisAsyncContext *ac, void *reply, void *priv);

/* The next batch of this node's holdings, or the end. */
static void leave_step(struct directory *d)
{
    if (loop_now_ms() >= d->leave_deadline_ms || dir_cleanup_send(d, "", on_leave_cleanup) < 0)
        dir_leave_finish(d);
}

static void on_leave_cleanup(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);
    const redisReply *rep = reply;
    uint64_t taken, removed;

    if (!rep)
        return; /* connection_lost finishes the leave */
    if (!dir_cleanup_reply(d, rep, &taken, &removed)) {
        dir_command_failed(d, "leave", dir_reply_why(rep));
        dir_leave_finish(d);
        return;
    }
    d->counters.cleaned += removed;
    if (taken > 0)
        leave_step(d);
    else
        dir_leave_finish(d);
}

/* The node entry is gone: nobody is offered this node any more. */
static void on_left_entry(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);

    if (!reply)
        return;
    if (dir_reply_error(reply))
        dir_command_failed(d, "leave", dir_reply_error(reply));
    leave_step(d);
}

void dir_leave_start(struct directory *d)
{
    char key[NODE_KEY_MAX];
    const char *argv[] = {"DEL", key};

    d->leaving = 1;
    dir_owner_stop(d);
    loop_timer_stop(d->loop, &d->heartbeat);
    loop_timer_stop(d->loop, &d->events);
    dir_queue_drop(d);
    dir_arm(d, &d->leave_timer, d->leave_deadline_ms);
    if (!d->up) {
        dir_leave_finish(d);
        return;
    }
    d->up = 0;
    dir_entry_key(key, d->self.id);
    if (dir_send_command(d, on_left_entry, NULL, 2, argv) < 0)
        dir_leave_finish(d);
    else
        log_info("directory: leaving (node %s)", d->self.id);
}

/* The leave is over (done, given up at the deadline, or the connection lost): its callback
 * runs from the turn. */
void dir_leave_finish(struct directory *d)
{
    if (!d->leave_cb || d->left)
        return;
    d->left = 1;
    loop_timer_stop(d->loop, &d->leave_timer);
    dir_turn_soon(d);
}

void dir_leave_deliver(struct directory *d)
{
    void (*cb)(void *) = d->leave_cb;

    if (!d->left || !cb)
        return;
    d->leave_cb = NULL;
    cb(d->leave_arg);
}

void dir_on_leave_timer(struct loop *l, struct loop_timer *t)
{
    struct directory *d = t->arg;

    log_warn("directory: leaving: deadline passed; the rest goes at the next start");
    dir_leave_finish(d);
}
