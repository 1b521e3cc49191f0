/* kafka_auth: one clear line for a refused TLS handshake or SASL
 * authentication. See kafka_auth.h. */
#include "kafka/kafka_auth.h"

#include <stdio.h>
#include <string.h>

#include <openssl/x509.h>

#include "config/log.h"

const char *kafka_auth_kind(int err) {
        switch (err) {
        case RD_KAFKA_RESP_ERR__AUTHENTICATION:
        case RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED:
                return "auth";
        case RD_KAFKA_RESP_ERR__SSL:
                return "tls";
        default:
                return NULL;
        }
}

/* librdkafka's reasons start with the broker: "ssl://host:9093/bootstrap: ...". */
static void kafka_auth_broker(const char *reason, char *broker, size_t len) {
        const char *scheme = strstr(reason, "://"), *end = strstr(reason, ": ");

        if (scheme && end && scheme < end && (size_t)(end - reason) < len) {
                memcpy(broker, reason, (size_t)(end - reason));
                broker[end - reason] = '\0';
        } else
                snprintf(broker, len, "(unknown broker)");
}

static void kafka_auth_conf(rd_kafka_t *rk, const char *name, char *value, size_t len) {
        size_t n = len;

        if (rd_kafka_conf_get(rd_kafka_conf(rk), name, value, &n) != RD_KAFKA_CONF_OK || !*value)
                snprintf(value, len, "(none)");
}

void kafka_auth_on_error(kafka_auth_t *a, rd_kafka_t *rk, int err, const char *reason) {
        const char *kind = kafka_auth_kind(err);
        char broker[96], protocol[32], mechanism[32], key[128];
        const char *why = reason;
        unsigned i;

        if (!kind)
                return;
        kafka_auth_broker(reason, broker, sizeof(broker));
        kafka_auth_conf(rk, "security.protocol", protocol, sizeof(protocol));
        kafka_auth_conf(rk, "sasl.mechanisms", mechanism, sizeof(mechanism));
        /* The reason without the broker prefix, which the line names already. */
        if (strncmp(why, broker, strlen(broker)) == 0 && strncmp(why + strlen(broker), ": ", 2) == 0)
                why += strlen(broker) + 2;
        if (strcmp(kind, "tls") == 0)
                snprintf(a->reason, sizeof(a->reason), "TLS handshake with %s failed (security.protocol %s): %s",
                         broker, protocol, why);
        else
                snprintf(a->reason, sizeof(a->reason),
                         "SASL authentication to %s failed (security.protocol %s, sasl.mechanism %s): %s", broker,
                         protocol, mechanism, why);
        /* OpenSSL's own reason, when the certificate was refused. */
        pthread_mutex_lock(&a->verify_lock);
        if (strcmp(kind, "tls") == 0 && a->verify[0]) {
                size_t n = strlen(a->reason);

                snprintf(a->reason + n, sizeof(a->reason) - n, " (OpenSSL: %s)", a->verify);
                a->verify[0] = '\0';
        }
        pthread_mutex_unlock(&a->verify_lock);
        snprintf(key, sizeof(key), "%s %s", kind, broker);
        for (i = 0; i < a->n_logged; i++)
                if (strcmp(a->logged[i], key) == 0)
                        return;
        if (a->n_logged < KAFKA_AUTH_BROKERS_MAX)
                snprintf(a->logged[a->n_logged++], sizeof(a->logged[0]), "%s", key);
        log_error("Kafka %s; retrying at librdkafka's reconnect backoff", a->reason);
}

bool kafka_auth_is_repeat(const char *fac, const char *buf) {
        /* SSLCERTVRFY: the verify callback's own refusal, once a try. */
        return strcmp(fac, "SSLCERTVRFY") == 0 ||
               (strcmp(fac, "FAIL") == 0 &&
                (strstr(buf, "SSL handshake failed") || strstr(buf, "SASL authentication error") ||
                 strstr(buf, "SASL SCRAM") || strstr(buf, "Authentication failed")));
}

void kafka_auth_clear(kafka_auth_t *a) {
        a->reason[0] = '\0';
        a->n_logged = 0;
}

const char *kafka_auth_reason(const kafka_auth_t *a) {
        return a->reason;
}

int kafka_auth_verify(kafka_auth_t *a, const char *broker_name, int depth, const int *x509_error, char *errstr,
                      size_t errstr_size) {
        /* OpenSSL's verdict, unchanged (the host name check included). */
        if (*x509_error == 0)
                return 1;
        snprintf(errstr, errstr_size, "%s's certificate (chain depth %d): %s", broker_name, depth,
                 X509_verify_cert_error_string(*x509_error));
        pthread_mutex_lock(&a->verify_lock);
        snprintf(a->verify, sizeof(a->verify), "%s", X509_verify_cert_error_string(*x509_error));
        pthread_mutex_unlock(&a->verify_lock);
        return 0;
}

void kafka_auth_init(kafka_auth_t *a) {
        *a = (kafka_auth_t){};
        pthread_mutex_init(&a->verify_lock, NULL);
}

void kafka_auth_done(kafka_auth_t *a) {
        pthread_mutex_destroy(&a->verify_lock);
}
