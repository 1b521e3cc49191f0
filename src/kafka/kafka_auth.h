/* kafka_auth: what the daemon does when a broker refuses its TLS handshake
 * (unknown CA, wrong host name, expired certificate) or its SASL
 * authentication (a wrong password): librdkafka retries by itself at its
 * reconnect backoff, so this only has to say so clearly and once.
 *
 * One log line per broker and kind until the connection works again (a
 * partition assignment or a delivered record clears it), naming the
 * broker, security.protocol and sasl.mechanism, and librdkafka's reason;
 * librdkafka's own repeated FAIL lines for the same failure go to debug.
 * The last reason is kept for /healthz. librdkafka's reasons never hold a
 * password.
 *
 * Not here: counting (kafka.c counts every error by kind, with "auth" and
 * "tls" from kafka_auth_kind). */
#ifndef INFERD_KAFKA_AUTH_H
#define INFERD_KAFKA_AUTH_H

#include <pthread.h>
#include <stdbool.h>

#include <librdkafka/rdkafka.h>

#define KAFKA_AUTH_BROKERS_MAX 16

typedef struct kafka_auth {
        char reason[512];               /* the last failure's log line; "" = none since the last success */
        char logged[KAFKA_AUTH_BROKERS_MAX][128];       /* "<kind> <broker>" already logged */
        unsigned n_logged;
        /* OpenSSL's reason for the last refused certificate, written by
         * kafka_auth_verify_cb on librdkafka's threads. */
        pthread_mutex_t verify_lock;
        char verify[256];
} kafka_auth_t;

/* Before any other use, and kafka_auth_done after the last. */
void kafka_auth_init(kafka_auth_t *a);
void kafka_auth_done(kafka_auth_t *a);

/* "auth" for a SASL failure, "tls" for a TLS one, NULL for anything else. */
const char *kafka_auth_kind(int err);

/* An error_cb error of kind kafka_auth_kind(err) (not NULL): logs it the
 * first time for its broker, and keeps it for kafka_auth_reason. */
void kafka_auth_on_error(kafka_auth_t *a, rd_kafka_t *rk, int err, const char *reason);

/* Whether librdkafka's log line (facility, text) repeats a failure that
 * kafka_auth_on_error reports. */
bool kafka_auth_is_repeat(const char *fac, const char *buf);

/* For librdkafka's ssl.certificate.verify_cb (kafka.c's wrapper): keeps
 * OpenSSL's verdict on each certificate of the broker's chain and, on a
 * failure, keeps OpenSSL's reason ("certificate has expired", "unable to get
 * local issuer certificate", "Hostname mismatch") for the next
 * kafka_auth_on_error's line, since librdkafka 2.0.2 reduces it to
 * "certificate verify failed" there. Returns what the callback returns. Runs
 * on librdkafka's threads. */
int kafka_auth_verify(kafka_auth_t *a, const char *broker_name, int depth, const int *x509_error, char *errstr,
                      size_t errstr_size);

/* The connection works: the next failure is logged again. */
void kafka_auth_clear(kafka_auth_t *a);

/* The last failure ("" when none since the last success). */
const char *kafka_auth_reason(const kafka_auth_t *a);

#endif
