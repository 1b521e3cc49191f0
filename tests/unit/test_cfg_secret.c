/* Unit tests of cfg's secured-Kafka half (cfg_secret.c and its use by
 * cfg.c): [kafka.client] reaching both clients and overridden per client,
 * file: and credential: values, a secret never written out, the errors that
 * name the file and the key, the exposure warnings and the [metrics] TLS and
 * basic-auth keys.
 *
 * Each test works in its own mkdtemp directory (the config, the secret files
 * and a credentials directory) and removes it. No broker, no daemon. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/cfg.h"
#include "unit.h"

#define WEIGHTS "[model]\nweights = /var/lib/inferd/w.safetensors\n"
#define PASSWORD "s3cret-Pa55word"

static char dir[64];

static void dir_make(void) {
        snprintf(dir, sizeof(dir), "/tmp/inferd-test-secret.XXXXXX");
        CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
}

static void dir_remove(void) {
        char cmd[128];

        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        CU_ASSERT_EQUAL(system(cmd), 0);
        unsetenv("CREDENTIALS_DIRECTORY");
}

/* Writes text to <dir>/name with mode; returns the path (static). */
static const char *put(const char *name, const char *text, mode_t mode) {
        static char path[4][256];
        static int next;
        char *p = path[next++ % 4];
        FILE *f;

        snprintf(p, 256, "%s/%s", dir, name);
        f = fopen(p, "w");
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        fputs(text, f);
        fclose(f);
        chmod(p, mode);
        return p;
}

static int load(const char *text, cfg_t **ret, errbuf_t *err) {
        const char *p = put("inferd.ini", text, 0640);

        memset(err, 0, sizeof(*err));
        *ret = NULL;
        return cfg_load(ret, p, err);
}

static void conf_get(rd_kafka_conf_t *conf, const char *name, char *value, size_t len) {
        value[0] = '\0';
        CU_ASSERT_EQUAL(rd_kafka_conf_get(conf, name, value, &len), RD_KAFKA_CONF_OK);
}

static void test_cfg_secret_client_section(void) {
        rd_kafka_conf_t *conf;
        char v[256];
        errbuf_t err;
        cfg_t *c;

        dir_make();
        CU_ASSERT_EQUAL_FATAL(load(WEIGHTS "[kafka.client]\nsecurity.protocol = SASL_SSL\n"
                                   "sasl.mechanism = SCRAM-SHA-512\nsasl.username = inferd\n"
                                   "[kafka.producer]\nsasl.username = producer-user\n",
                                   &c, &err), 0);
        /* The consumer gets [kafka.client]; the producer's own key overrides it. */
        conf = rd_kafka_conf_new();
        CU_ASSERT_EQUAL(cfg_kafka_apply(c, 0, conf, &err), 0);
        conf_get(conf, "security.protocol", v, sizeof(v));
        CU_ASSERT_STRING_EQUAL(v, "sasl_ssl");
        conf_get(conf, "sasl.username", v, sizeof(v));
        CU_ASSERT_STRING_EQUAL(v, "inferd");
        rd_kafka_conf_destroy(conf);
        conf = rd_kafka_conf_new();
        CU_ASSERT_EQUAL(cfg_kafka_apply(c, 1, conf, &err), 0);
        conf_get(conf, "sasl.mechanisms", v, sizeof(v));
        CU_ASSERT_STRING_EQUAL(v, "SCRAM-SHA-512");
        conf_get(conf, "sasl.username", v, sizeof(v));
        CU_ASSERT_STRING_EQUAL(v, "producer-user");
        rd_kafka_conf_destroy(conf);
        cfg_free(c);

        /* Keys inferd sets itself are refused in [kafka.client] too, and a
         * bad value there names the section. */
        CU_ASSERT_EQUAL(load(WEIGHTS "[kafka.client]\ngroup.id = x\n", &c, &err), -EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "[kafka.client] group.id: may not be set here"));
        CU_ASSERT_EQUAL(load(WEIGHTS "[kafka.client]\nenable.idempotence = false\n", &c, &err), -EINVAL);
        CU_ASSERT_EQUAL_FATAL(load(WEIGHTS "[kafka.client]\nsecurity.protocol = carrier-pigeon\n", &c, &err), 0);
        conf = rd_kafka_conf_new();
        CU_ASSERT_EQUAL(cfg_kafka_apply(c, 1, conf, &err), -EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "[kafka.client] security.protocol: "));
        rd_kafka_conf_destroy(conf);
        cfg_free(c);
        dir_remove();
}

static void test_cfg_secret_file_and_credential(void) {
        char text[2048], v[256], *out = NULL;
        rd_kafka_conf_t *conf;
        size_t out_len = 0;
        const char *pw, *ca;
        errbuf_t err;
        FILE *f;
        cfg_t *c;

        dir_make();
        pw = put("password", PASSWORD "\n", 0600);
        ca = put("ca.pem", "-----BEGIN CERTIFICATE-----\n", 0644);
        CU_ASSERT_EQUAL(mkdir(strcat(strcpy(v, dir), "/creds"), 0700), 0);
        put("creds/key-password", "key-" PASSWORD, 0600);
        put("creds/ca", "-----BEGIN CERTIFICATE-----\n", 0600);
        setenv("CREDENTIALS_DIRECTORY", v, 1);

        snprintf(text, sizeof(text),
                 WEIGHTS "[kafka.client]\nsasl.password = file:%s\nssl.key.password = credential:key-password\n"
                         "ssl.ca.location = credential:ca\n[kafka.consumer]\nssl.crl.location = %s\n",
                 pw, ca);
        CU_ASSERT_EQUAL_FATAL(load(text, &c, &err), 0);
        conf = rd_kafka_conf_new();
        CU_ASSERT_EQUAL(cfg_kafka_apply(c, 0, conf, &err), 0);
        /* The content, its newline removed... */
        conf_get(conf, "sasl.password", v, sizeof(v));
        CU_ASSERT_STRING_EQUAL(v, PASSWORD);
        conf_get(conf, "ssl.key.password", v, sizeof(v));
        CU_ASSERT_STRING_EQUAL(v, "key-" PASSWORD);
        /* ...but a *.location key gets the credential's path. */
        conf_get(conf, "ssl.ca.location", v, sizeof(v));
        CU_ASSERT_PTR_NOT_NULL(strstr(v, "/creds/ca"));
        rd_kafka_conf_destroy(conf);

        /* --print-config: secrets as (secret), references as written. */
        f = open_memstream(&out, &out_len);
        CU_ASSERT_EQUAL(cfg_write_ini(c, f), 0);
        fclose(f);
        CU_ASSERT_PTR_NULL(strstr(out, PASSWORD));
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "[kafka.client]\nsasl.password = \"(secret)\"\n"));
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "ssl.key.password = \"(secret)\"\n"));
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "ssl.ca.location = \"credential:ca\"\n"));
        free(out);
        cfg_free(c);

        /* A missing file: an error naming the key and the file. */
        snprintf(text, sizeof(text), WEIGHTS "[kafka.client]\nsasl.password = file:%s/nope\n", dir);
        CU_ASSERT_EQUAL(load(text, &c, &err), -ENOENT);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "inferd.ini: [kafka.client] sasl.password: /"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "/nope: cannot open the secret's file: No such file or directory"));
        /* A missing certificate named directly. */
        snprintf(text, sizeof(text), WEIGHTS "[kafka.producer]\nssl.certificate.location = %s/client.pem\n", dir);
        CU_ASSERT_EQUAL(load(text, &c, &err), -ENOENT);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "[kafka.producer] ssl.certificate.location: cannot read '"));
        /* An unknown credential, and no credentials directory at all. */
        CU_ASSERT_EQUAL(load(WEIGHTS "[kafka.client]\nsasl.password = credential:other\n", &c, &err), -ENOENT);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "[kafka.client] sasl.password: /"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "/creds/other: cannot open the secret's file"));
        unsetenv("CREDENTIALS_DIRECTORY");
        CU_ASSERT_EQUAL(load(WEIGHTS "[kafka.client]\nsasl.password = credential:key-password\n", &c, &err),
                        -ENOENT);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "$CREDENTIALS_DIRECTORY, which is not set"));
        CU_ASSERT_EQUAL(load(WEIGHTS "[kafka.client]\nsasl.password = credential:../x\n", &c, &err), -EINVAL);
        /* A directory is not a secret's file. */
        snprintf(text, sizeof(text), WEIGHTS "[kafka.client]\nsasl.password = file:%s\n", dir);
        CU_ASSERT_EQUAL(load(text, &c, &err), -EISDIR);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "the secret's file is a directory, not a regular file"));
        /* A NUL byte would cut the secret short: refused. */
        {
                char nul[128];
                FILE *f;

                snprintf(nul, sizeof(nul), "%s/nul", dir);
                f = fopen(nul, "w");
                CU_ASSERT_PTR_NOT_NULL_FATAL(f);
                fwrite("ab\0cd\n", 1, 6, f);
                fclose(f);
                snprintf(text, sizeof(text), WEIGHTS "[kafka.client]\nsasl.password = file:%s\n", nul);
                CU_ASSERT_EQUAL(load(text, &c, &err), -EINVAL);
                CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "/nul: the secret's file holds a NUL byte"));
        }
        dir_remove();
}

/* A secret refused by librdkafka is not quoted back. */
static void test_cfg_secret_not_in_errors(void) {
        rd_kafka_conf_t *conf;
        errbuf_t err;
        cfg_t *c;

        dir_make();
        /* ssl.key.pem is a secret; an unknown sasl.* secret-named key is
         * refused by librdkafka with its name, never its value. */
        CU_ASSERT_EQUAL_FATAL(load(WEIGHTS "[kafka.client]\nsasl.oauthbearer.client.secret.x = " PASSWORD "\n", &c,
                                   &err), 0);
        conf = rd_kafka_conf_new();
        CU_ASSERT_EQUAL(cfg_kafka_apply(c, 0, conf, &err), -EINVAL);
        CU_ASSERT_PTR_NULL(strstr(err.msg, PASSWORD));
        rd_kafka_conf_destroy(conf);
        cfg_free(c);
        dir_remove();
}

static void test_cfg_secret_exposed(void) {
        errbuf_t err, warn[4];
        char text[512];
        const char *pw;
        cfg_t *c;

        dir_make();
        /* Plain text in a 0640 file: nobody else can read it. */
        CU_ASSERT_EQUAL_FATAL(load(WEIGHTS "[kafka.client]\nsasl.password = " PASSWORD "\n", &c, &err), 0);
        CU_ASSERT_EQUAL(cfg_find_exposed_secrets(c, warn, 4), 0);
        /* World-readable: one warning, naming the file and key, never the value. */
        chmod(c->path, 0644);
        CU_ASSERT_EQUAL(cfg_find_exposed_secrets(c, warn, 4), 1);
        CU_ASSERT_PTR_NOT_NULL(strstr(warn[0].msg, "inferd.ini: [kafka.client] sasl.password: a plain-text secret"));
        CU_ASSERT_PTR_NULL(strstr(warn[0].msg, PASSWORD));
        cfg_free(c);

        /* A file: secret that every user can read. */
        pw = put("pw", PASSWORD, 0604);
        snprintf(text, sizeof(text), WEIGHTS "[kafka.consumer]\nsasl.password = file:%s\n", pw);
        CU_ASSERT_EQUAL_FATAL(load(text, &c, &err), 0);
        chmod(c->path, 0644);   /* holds no secret itself: no warning for it */
        CU_ASSERT_EQUAL(cfg_find_exposed_secrets(c, warn, 4), 1);
        CU_ASSERT_PTR_NOT_NULL(strstr(warn[0].msg, "[kafka.consumer] sasl.password: the secret's file"));
        chmod(pw, 0640);
        CU_ASSERT_EQUAL(cfg_find_exposed_secrets(c, warn, 4), 0);
        cfg_free(c);
        dir_remove();
}

static void test_cfg_secret_metrics_keys(void) {
        char text[1024], credsdir[128];
        const char *cert, *key;
        errbuf_t err;
        cfg_t *c;

        dir_make();
        cert = put("cert.pem", "x", 0644);
        key = put("key.pem", "x", 0600);
        snprintf(text, sizeof(text), WEIGHTS "[metrics]\ntls_cert = %s\ntls_key = %s\n", cert, key);
        CU_ASSERT_EQUAL_FATAL(load(text, &c, &err), 0);
        CU_ASSERT_STRING_EQUAL(c->metrics.tls_cert, cert);
        CU_ASSERT_STRING_EQUAL(c->metrics.tls_key, key);
        CU_ASSERT_FALSE(c->metrics.auth_healthz);
        cfg_free(c);

        /* One without the other. */
        snprintf(text, sizeof(text), WEIGHTS "[metrics]\ntls_cert = %s\n", cert);
        CU_ASSERT_EQUAL(load(text, &c, &err), -EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "[metrics] tls_key: required with tls_cert"));
        /* A missing file, named with its key. */
        snprintf(text, sizeof(text), WEIGHTS "[metrics]\ntls_cert = %s\ntls_key = %s/gone.pem\n", cert, dir);
        CU_ASSERT_EQUAL(load(text, &c, &err), -ENOENT);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "[metrics] tls_key: cannot read '"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "gone.pem': No such file or directory"));
        /* The users file as a credential: its path. */
        snprintf(credsdir, sizeof(credsdir), "%s/creds", dir);
        CU_ASSERT_EQUAL(mkdir(credsdir, 0700), 0);
        put("creds/users", "prometheus:$2y$10$abcdefghijklmnopqrstuu0123456789012345678901234567890\n", 0600);
        setenv("CREDENTIALS_DIRECTORY", credsdir, 1);
        CU_ASSERT_EQUAL_FATAL(load(WEIGHTS "[metrics]\nbasic_auth_users = credential:users\nauth_healthz = yes\n",
                                   &c, &err), 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(c->metrics.basic_auth_users, "/creds/users"));
        CU_ASSERT_TRUE(c->metrics.auth_healthz);
        cfg_free(c);
        dir_remove();
}

int test_cfg_secret_register(void) {
        static CU_TestInfo tests[] = {
                { "client_section", test_cfg_secret_client_section },
                { "file_and_credential", test_cfg_secret_file_and_credential },
                { "not_in_errors", test_cfg_secret_not_in_errors },
                { "exposed", test_cfg_secret_exposed },
                { "metrics_keys", test_cfg_secret_metrics_keys },
                CU_TEST_INFO_NULL,
        };

        return unit_add_suite("cfg_secret", tests);
}
