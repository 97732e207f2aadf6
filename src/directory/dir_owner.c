/*
 * dir_owner.c - whether this node's id is free to take, at its first connection. An entry
 * under the id that another incarnation keeps refreshing is a live node using the id: this
 * node refuses it (the id_taken hook: the daemon stops, saying which node) rather than take
 * over its entry and remove its holdings. An entry that is not refreshed is an earlier run that
 * died (its TTL runs out within ttl_ms: a restart after a crash waits that long at most) and
 * one not signed with our secret was planted: the start goes on (the registration replaces
 * it). Two nodes that start at once under the same id, with no entry yet, are not told apart.
 */
#include "directory/directory_int.h"

#include "common/log.h"

/* How often the entry is looked at while it may be refreshed (a heartbeat is
 * directory_config.heartbeat_ms apart). */
#define OWNER_POLL_MS 100u

static void on_owner(redisAsyncContext *ac, void *reply, void *priv);

static void owner_ask(struct directory *d)
{
    char key[NODE_KEY_MAX];
    const char *multi[] = {"MULTI"}, *all[] = {"HGETALL", key}, *pttl[] = {"PTTL", key};
    const char *exec[] = {"EXEC"};

    dir_entry_key(key, d->self.id);
    if (dir_send_command(d, dir_on_checked, "MULTI", 1, multi) < 0 ||
        dir_send_command(d, dir_on_checked, "HGETALL", 2, all) < 0 ||
        dir_send_command(d, dir_on_checked, "PTTL", 2, pttl) < 0 ||
        dir_send_command(d, on_owner, NULL, 1, exec) < 0)
        dir_drop(d, "cannot ask for this node id's entry");
}

void dir_owner_check(struct directory *d)
{
    d->owner_inc = 0;
    d->owner_ttl = 0;
    owner_ask(d);
}

void dir_on_owner_timer(struct loop *l, struct loop_timer *t)
{
    struct directory *d = t->arg;

    if (d->ac && !d->up)
        owner_ask(d);
}

/* The owner is alive: said, and the hook stops this node. Nothing is registered. */
static void refuse(struct directory *d, const struct directory_node *owner)
{
    char when[32];

    directory_inc_time(owner->inc, when, sizeof(when));
    snprintf(d->down_why, sizeof(d->down_why),
             "node id %s is in use by a live node (at %.80s, running since %s UTC)", d->self.id,
             owner->addr, when);
    log_error("directory: %s: this node stops; give it another --node-id, or stop that node "
              "first",
              d->down_why);
    d->refused = 1;
    if (d->hooks.id_taken)
        d->hooks.id_taken(d->hooks.ctx, d->down_why);
}

/* The reply to [HGETALL, PTTL] of the entry. */
static void on_owner(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);
    const redisReply *rep = reply;
    struct directory_node owner = {0};
    enum dir_entry kind;
    long long ttl;

    if (!rep)
        return;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
        rep->element[1]->type != REDIS_REPLY_INTEGER) {
        dir_drop(d, "this node id's entry: %s",
                 dir_reply_error(rep) ? dir_reply_error(rep) : "bad reply");
        return;
    }
    ttl = rep->element[1]->integer;
    snprintf(owner.id, sizeof(owner.id), "%s", d->self.id);
    kind = dir_wrongtype(rep->element[0]) ? DIR_ENTRY_MISSING
                                          : dir_parse_entry(d, rep->element[0], &owner);
    if (kind == DIR_ENTRY_UNSIGNED)
        dir_entry_refused(d, d->self.id);
    if (kind != DIR_ENTRY_OK || ttl < 0 || owner.inc == d->self.inc) {
        dir_cleanup_start(d); /* free, an earlier run's that expired, or planted */
        return;
    }
    /* A heartbeat sets the TTL back to its whole: a TTL longer than the last one seen, or
     * another incarnation, is a live node's. */
    if (d->owner_inc && (owner.inc != d->owner_inc || (uint64_t)ttl > d->owner_ttl)) {
        refuse(d, &owner);
        return;
    }
    if (!d->owner_inc)
        log_info("directory: node id %s has an entry (at %s, %lld ms to live): waiting to see "
                 "whether its node is alive",
                 d->self.id, owner.addr, ttl);
    d->owner_inc = owner.inc;
    d->owner_ttl = (uint64_t)ttl;
    dir_arm(d, &d->owner_timer, loop_now_ms() + OWNER_POLL_MS);
}
