/*
 * engine_check.c - a want's check state, which every file of the engine reads or resets: whether
 * its bytes are checked chunk by chunk, whether it seals with its holder's tree, and its start
 * again from its range's first byte. Below the files that check (engine_verify.c), split and
 * relay, so that none of them calls another for it.
 */
#include "transfer/engine_int.h"

/* Whether w's bytes are checked, chunk by chunk, against the holder's tree before the seal:
 * with --verify (SHA-256 of every byte costs a core per ~1.9 GB/s; without it a transfer is as
 * fast as before the digest), and a range from a partial holder unless --no-relay-check: a
 * copy nobody checked would otherwise be passed down a chain of relays, and a bad range is
 * named at its first hop. The holder's reply is checked either way (eng_inherits). */
int eng_checked(const struct want *w)
{
    return w->e->cfg.verify || (w->relayed && !w->e->cfg.relay_unchecked);
}

/* Whether w takes the holder's tree from its reply and seals with it: with --verify (its
 * bytes are checked against it), and whenever the directory recorded the id's content (the
 * reply's root was compared with the record, its leaves with its root). Otherwise the copy is
 * hashed here after its seal, rather than trusting a root nobody compared. */
int eng_inherits(const struct engine *e, const struct want *w)
{
    return e->cfg.verify || w->has_content;
}

/* Detaches w from its checks in flight: their answers are dropped. */
static void check_detach(struct want *w)
{
    if (!w->check.vc)
        return;
    if (w->check.vc->out)
        w->check.vc->w = NULL; /* the last job back frees it */
    else
        free(w->check.vc);
    w->check.vc = NULL;
}

void eng_check_reset(struct want *w)
{
    check_detach(w);
    digest_stream_free(w->check.stream);
    w->check.stream = NULL;
    w->check.streamed = 0;
    w->check.rlanded = 0;
    w->check.landed = w->check.handed = 0;
    w->check.bad_chunk = NO_CHUNK;
    w->check.broken = w->check.waiting = 0;
}
