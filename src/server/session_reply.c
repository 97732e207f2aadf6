/* session_reply.c - a session's replies: a status, n statuses and a reason, and a reply with a
 * descriptor (session_int.h). */
#include "server/session_int.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"
#include "common/usock.h"

size_t session_reply_begin(struct session *ss, const struct proto_request *q, int32_t status)
{
    size_t start = proto_frame_begin(&ss->out, (uint16_t)(q->type | PROTO_REPLY_BIT), q->tag);
    pbuf_u32(&ss->out, (uint32_t)status);
    return start;
}

int session_reply_status(struct session *ss, const struct proto_request *q, int status)
{
    size_t start = session_reply_begin(ss, q, status);

    if (status < 0) {
        const char *detail = ferry_errmsg();
        size_t len = strnlen(detail, PROTO_MAX_DETAIL);
        pbuf_u16(&ss->out, (uint16_t)len);
        pbuf_put(&ss->out, detail, len);
    }
    proto_frame_end(&ss->out, start);
    return 0;
}

/* A reply of n statuses and the first failure's reason (FETCH, PUT_BATCH). */
void session_reply_statuses(struct session *ss, const struct proto_request *q,
                            const int32_t *statuses, uint32_t n, const char *why)
{
    size_t start = session_reply_begin(ss, q, 0), len = strnlen(why, PROTO_MAX_DETAIL);

    pbuf_u32(&ss->out, n);
    for (uint32_t i = 0; i < n; i++)
        pbuf_u32(&ss->out, (uint32_t)statuses[i]);
    pbuf_u16(&ss->out, (uint16_t)len);
    pbuf_put(&ss->out, why, len);
    proto_frame_end(&ss->out, start);
}

int session_send_fd(struct session *ss, const struct proto_request *q, int fd)
{
    ssize_t n = ss->out.oom ? -ENOMEM : usock_send_fd(ss->fd, ss->out.data, ss->out.len, fd);

    close(fd);
    if (n < 0)
        return err_set(FERRY_EPROTO, "%s: sending the descriptor: %s", proto_type_name(q->type),
                       strerror((int)-n));
    pbuf_consume(&ss->out, (size_t)n);
    return 0;
}
