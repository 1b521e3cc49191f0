/* kafka_rebalance: the group's rebalances and the pause of fetching. An
 * assignment is taken at once (its pause state set); a revoke may be
 * deferred by the owner (kafka_revoke_pending, kafka_revoke_done), which
 * serves its loop meanwhile. Pausing and resuming are for every assigned
 * partition at once, and a pause that librdkafka dropped is made again
 * (kafka_pause_again).
 *
 * Not here: consuming and producing (kafka.c), transactions (kafka_txn.c). */
#include "kafka/kafka_priv.h"

#include <errno.h>
#include <string.h>

#include "config/log.h"

static bool kafka_cooperative(kafka_t *k) {
        return strcmp(rd_kafka_rebalance_protocol(k->consumer), "COOPERATIVE") == 0;
}

/* librdkafka's unassign of parts, then the revoked callback. */
static void kafka_unassign(kafka_t *k, const rd_kafka_topic_partition_list_t *parts, bool coop) {
        rd_kafka_error_t *e = NULL;
        rd_kafka_resp_err_t re = RD_KAFKA_RESP_ERR_NO_ERROR;

        if (coop)
                e = rd_kafka_incremental_unassign(k->consumer, parts);
        else
                re = rd_kafka_assign(k->consumer, NULL);
        if (e || re)
                log_error("Failed to unassign partitions: %s", e ? rd_kafka_error_string(e) : rd_kafka_err2str(re));
        rd_kafka_error_destroy(e);
        kafka_parts_assigned(k, parts, false);
        if (k->cb.revoked)
                k->cb.revoked(k->userdata, parts);
}

/* Gives the partitions up: the daemon's revoking callback (which answers
 * or hands back what it took from them), then the unassign. lost: the group
 * has already moved them on.
 *
 * The callback may defer (issue 36): a revoke is then a state of the
 * daemon's loop, which goes on serving its engine, producer, probes and
 * timers until the records taken from the partitions are finished or given
 * up, and the commit or abort is done on the transaction thread; only then
 * does it call kafka_revoke_done. librdkafka allows the rebalance callback
 * to return without the unassign: the group's rebalance waits for the call
 * (its WAIT_UNASSIGN_CALL state), and the revoked partitions are paused by
 * librdkafka meanwhile. The callback was chosen over RD_KAFKA_EVENT_REBALANCE
 * on a queue of its own: the rebalances already arrive on the consumer queue
 * the loop serves, and nothing else changes. While one is pending,
 * kafka_consume polls nothing, so no later rebalance (an assignment the
 * unassign would throw away) is served before it. Closing, nothing defers:
 * the close (kafka_close_start, served by kafka_close_serve) goes on only
 * after the unassign, which is done at once. */
static void kafka_revoke(kafka_t *k, rd_kafka_topic_partition_list_t *parts, bool lost, bool coop) {
        rd_kafka_topic_partition_list_t *copy = k->closed ? NULL : rd_kafka_topic_partition_list_copy(parts);

        if (k->revoke) {
                /* Not seen: librdkafka sends none before the unassign. */
                log_warning("A revoke came while another was pending: completing that one first");
                kafka_revoke_done(k);
        }
        if (k->cb.revoking && k->cb.revoking(k->userdata, parts, lost, copy != NULL)) {
                k->revoke = copy;
                k->revoke_coop = coop;
                return;
        }
        if (copy)
                rd_kafka_topic_partition_list_destroy(copy);
        kafka_unassign(k, parts, coop);
}

void kafka_revoke_done(kafka_t *k) {
        rd_kafka_topic_partition_list_t *parts = k->revoke;

        if (!parts)
                return;
        k->revoke = NULL;
        kafka_unassign(k, parts, k->revoke_coop);
        rd_kafka_topic_partition_list_destroy(parts);
}

const rd_kafka_topic_partition_list_t *kafka_revoke_pending(const kafka_t *k) {
        return k->revoke;
}

/* Pauses or resumes parts as the intake wants them (k->paused). Returns
 * whether librdkafka knew every partition (a pause of one it does not know
 * yet is refused for that one). */
static bool kafka_parts_set_paused(kafka_t *k, const rd_kafka_topic_partition_list_t *parts) {
        rd_kafka_topic_partition_list_t *copy = rd_kafka_topic_partition_list_copy(parts);
        bool all = copy != NULL;

        if (!copy)
                return false;
        /* The calls write each element's err. */
        if (k->paused)
                rd_kafka_pause_partitions(k->consumer, copy);
        else
                rd_kafka_resume_partitions(k->consumer, copy);
        for (int i = 0; i < copy->cnt; i++)
                all = all && !copy->elems[i].err;
        rd_kafka_topic_partition_list_destroy(copy);
        return all;
}

void kafka_rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts,
                        void *opaque) {
        kafka_t *k = opaque;
        bool coop = kafka_cooperative(k), lost, set_before;
        rd_kafka_error_t *e = NULL;
        rd_kafka_resp_err_t re = RD_KAFKA_RESP_ERR_NO_ERROR;

        switch (err) {
        case RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
                log_info("Assigned %d partition(s) (%s rebalance)", parts->cnt, coop ? "cooperative" : "eager");
                /* The pause state before the assign, either way: librdkafka
                 * keeps a partition's pause flag across an unassign, so a
                 * partition paused when it was revoked would come back
                 * paused. Before the assign where librdkafka knows the
                 * partition already (it refuses one it has never had): 2.0.2
                 * drops a pause as outdated when the assignment's fetch start
                 * draws the partition's next version barrier between the
                 * pause's and its queueing, and the partition then fetches
                 * while paused. A first assignment can only be paused after
                 * the assign, and about one in twenty loses that race on the
                 * in-process mock (unit pipeline intake_closed_takes_nothing):
                 * kafka_consume pauses it again at its first record. */
                set_before = kafka_parts_set_paused(k, parts);
                if (coop)
                        e = rd_kafka_incremental_assign(rk, parts);
                else
                        re = rd_kafka_assign(rk, parts);
                if (e || re) {
                        log_error("Failed to assign partitions: %s",
                                  e ? rd_kafka_error_string(e) : rd_kafka_err2str(re));
                        rd_kafka_error_destroy(e);
                        break;
                }
                kafka_parts_assigned(k, parts, true);
                kafka_health_ok(k);
                if (k->cb.assigned)
                        k->cb.assigned(k->userdata, parts);
                /* A partition librdkafka did not know before the assign. */
                if (!set_before)
                        kafka_parts_set_paused(k, parts);
                break;

        case RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS:
                lost = rd_kafka_assignment_lost(rk);
                log_info("Revoking %d partition(s)%s (%s rebalance)", parts->cnt, lost ? ", lost" : "",
                         coop ? "cooperative" : "eager");
                kafka_revoke(k, parts, lost, coop);
                break;

        default:
                /* librdkafka (2.x) sends only the two above; rdkafka.h asks
                 * that any other be handled as a failed rebalance. The
                 * partitions are given up as lost, through the same path
                 * as a revoke: what was taken from them is answered or
                 * handed back, and their offsets are not committed past it. */
                log_error("Kafka rebalance failed: %s; giving up %d partition(s) as lost", rd_kafka_err2str(err),
                          parts ? parts->cnt : 0);
                if (parts)
                        kafka_revoke(k, parts, true, coop);
                else
                        rd_kafka_assign(rk, NULL);
                break;
        }
}

/* A record of a partition while fetching is paused: librdkafka dropped the
 * pause (see kafka_rebalance_cb: a pause whose version barrier lost the race
 * with another thread's is ignored as outdated). Pausing the partition again
 * draws a new barrier: what was fetched beyond this record is dropped, and
 * the resume fetches from the record after it. */
void kafka_pause_again(kafka_t *k, const rd_kafka_message_t *m) {
        rd_kafka_topic_partition_list_t *one = rd_kafka_topic_partition_list_new(1);

        if (!one)
                return;
        rd_kafka_topic_partition_list_add(one, rd_kafka_topic_name(m->rkt), m->partition);
        rd_kafka_pause_partitions(k->consumer, one);
        rd_kafka_topic_partition_list_destroy(one);
        log_info_f(((log_fields_t){ LOG_TOPIC(rd_kafka_topic_name(m->rkt)), LOG_PARTITION(m->partition),
                                    LOG_OFFSET(m->offset) }),
                   "A record came from a paused partition (librdkafka dropped the pause): paused it again");
}

int kafka_set_paused(kafka_t *k, bool paused) {
        rd_kafka_topic_partition_list_t *parts = NULL;
        rd_kafka_resp_err_t re;

        if (k->paused == paused || k->closed)
                return 0;
        re = rd_kafka_assignment(k->consumer, &parts);
        if (re)
                return -EIO;
        re = paused ? rd_kafka_pause_partitions(k->consumer, parts) : rd_kafka_resume_partitions(k->consumer, parts);
        rd_kafka_topic_partition_list_destroy(parts);
        if (re)
                return -EIO;
        k->paused = paused;
        return 0;
}

bool kafka_is_paused(const kafka_t *k) {
        return k->paused;
}
