/* Unit tests for the CRI protobuf codec and messages (cri/pb.h, cri/messages.h), with the
 * golden vectors of ../shared/spec/cri-streaming.md §4. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include <cri/messages.h>
#include <cri/pb.h>

#include "testutil.h"

static void expect_hex(const uint8_t *got, ssize_t n, const char *hex)
{
	uint8_t want[1024];
	long wn = hex_decode(hex, want, sizeof want);
	assert_true(wn > 0);
	assert_int_equal(n, wn);
	assert_memory_equal(got, want, (size_t)wn);
}

static void test_cri_encode__golden_vectors(void **state)
{
	(void)state;
	uint8_t buf[1024];
	const char *cmd[] = {"ls", "-l"};
	ssize_t n = cri_encode_exec_request(buf, sizeof buf, "3f2a9c", cmd, 2, false, false, true,
	                                    true);
	expect_hex(buf, n, "0a06336632613963120 26c7312022d6c28013001");
	const int32_t ports[] = {8080};
	n = cri_encode_port_forward_request(buf, sizeof buf, "sandboxid", ports, 1);
	expect_hex(buf, n, "0a0973616e64626f78696412 02903f");
	const struct cri_label sel[] = {{CRI_LABEL_POD_NAMESPACE, "default"},
	                                {CRI_LABEL_POD_NAME, "nginx"},
	                                {CRI_LABEL_CONTAINER_NAME, "nginx"}};
	n = cri_encode_list_containers_request(buf, sizeof buf, NULL, sel, 3,
	                                       CRI_CONTAINER_RUNNING);
	assert_int_equal(n, 2 + 116);
	assert_int_equal(buf[0], 0x0a);
	assert_int_equal(buf[1], 0x74);
	expect_hex(buf + 2, 8, "1202080122260a1b");
	assert_memory_equal(buf + 10, "io.kubernetes.pod.namespace", 27);
	/* a zero state still goes inside its wrapper: "state == CREATED", not "any state" */
	n = cri_encode_list_pod_sandbox_request(buf, sizeof buf, NULL, 0, CRI_SANDBOX_READY);
	expect_hex(buf, n, "0a021200");
	n = cri_encode_list_pod_sandbox_request(buf, sizeof buf, NULL, 0, -1);
	expect_hex(buf, n, "0a00");
	n = cri_encode_attach_request(buf, sizeof buf, "c1", true, true, true, false);
	expect_hex(buf, n, "0a0263311001180120 01");
	n = cri_encode_version_request(buf, sizeof buf, "0.1.0");
	expect_hex(buf, n, "0a05302e312e30");
	n = cri_encode_container_status_request(buf, sizeof buf, "abc");
	expect_hex(buf, n, "0a03616263");
	/* too small a buffer is refused whole */
	assert_int_equal(
	        cri_encode_exec_request(buf, 10, "3f2a9c", cmd, 2, false, false, true, true),
	        -EMSGSIZE);
}

static void test_cri_decode__url(void **state)
{
	(void)state;
	uint8_t msg[64];
	long n = hex_decode("0a24687474703a2f2f3132372e302e302e313a33353030312f657865632f58793"
	                    "35f41623951",
	                    msg, sizeof msg);
	char url[128];
	assert_int_equal(cri_decode_url_response(msg, (size_t)n, url, sizeof url), 0);
	assert_string_equal(url, "http://127.0.0.1:35001/exec/Xy3_Ab9Q");
	assert_int_equal(cri_decode_url_response(msg, (size_t)n, url, 10), -EMSGSIZE);
	assert_int_equal(cri_decode_url_response(msg, 0, url, sizeof url), -ENODATA);
	assert_int_equal(cri_decode_url_response(msg, (size_t)n - 1, url, sizeof url), -EBADMSG);
	const uint8_t nul[] = {0x0a, 0x03, 'a', 0, 'b'};
	assert_int_equal(cri_decode_url_response(nul, sizeof nul, url, sizeof url), -EBADMSG);
	const uint8_t wrong_type[] = {0x08, 0x01}; /* field 1 as a varint: malformed, as in Go */
	assert_int_equal(cri_decode_url_response(wrong_type, sizeof wrong_type, url, sizeof url),
	                 -EBADMSG);
}

/* Builds a ListPodSandboxResponse with two sandboxes and an unknown field. */
static size_t sandboxes(uint8_t *out, size_t cap)
{
	struct cri_pb_writer w = {.p = out, .cap = cap};
	for (int i = 0; i < 2; i++) {
		uint8_t meta[256], item[512];
		struct cri_pb_writer m = {.p = meta, .cap = sizeof meta};
		cri_pb_put_string(&m, 1, "web");
		cri_pb_put_string(&m, 2, i ? "uid-2" : "uid-1");
		cri_pb_put_string(&m, 3, "default");
		cri_pb_put_uint(&m, 4, (uint64_t)i);
		struct cri_pb_writer it = {.p = item, .cap = sizeof item};
		cri_pb_put_string(&it, 1, i ? "sb2" : "sb1");
		cri_pb_put_bytes(&it, 2, meta, m.len);
		cri_pb_put_uint(&it, 3, (uint64_t)(i ? CRI_SANDBOX_READY : CRI_SANDBOX_NOTREADY));
		cri_pb_put_uint(&it, 4, 1700000000000000000ull + (uint64_t)i);
		cri_pb_put_string(&it, 7, "runc"); /* runtime_handler: not kept */
		cri_pb_put_varint(&it, 99, 5);     /* unknown: skipped */
		cri_pb_put_bytes(&w, 1, item, it.len);
	}
	assert_false(w.overflow);
	return w.len;
}

static void test_cri_decode__sandboxes(void **state)
{
	(void)state;
	uint8_t msg[2048];
	size_t len = sandboxes(msg, sizeof msg);
	struct cri_sandbox sb[4];
	size_t n, total;
	assert_int_equal(cri_decode_list_pod_sandbox_response(msg, len, sb, 4, &n, &total), 0);
	assert_int_equal(n, 2);
	assert_int_equal(total, 2);
	assert_string_equal(sb[0].id, "sb1");
	assert_int_equal(sb[0].state, CRI_SANDBOX_NOTREADY);
	assert_string_equal(sb[1].uid, "uid-2");
	assert_string_equal(sb[1].namespace_, "default");
	assert_int_equal(sb[1].attempt, 1);
	assert_int_equal(sb[1].state, CRI_SANDBOX_READY);
	assert_true(sb[1].created_at == 1700000000000000001ll);
	/* room for one: both counted, one stored */
	assert_int_equal(cri_decode_list_pod_sandbox_response(msg, len, sb, 1, &n, &total), 0);
	assert_int_equal(n, 1);
	assert_int_equal(total, 2);
	/* every proper prefix is malformed or a shorter list, never a crash */
	for (size_t cut = 0; cut < len; cut++) {
		int rc = cri_decode_list_pod_sandbox_response(msg, cut, sb, 4, &n, &total);
		assert_true(rc == 0 || rc == -EBADMSG);
	}
}

static void test_cri_decode__containers_and_status(void **state)
{
	(void)state;
	uint8_t meta[64], item[256], msg[512];
	struct cri_pb_writer m = {.p = meta, .cap = sizeof meta};
	cri_pb_put_string(&m, 1, "app");
	cri_pb_put_uint(&m, 2, 3);
	struct cri_pb_writer it = {.p = item, .cap = sizeof item};
	cri_pb_put_string(&it, 1, "c1");
	cri_pb_put_string(&it, 2, "sb1");
	cri_pb_put_bytes(&it, 3, meta, m.len);
	cri_pb_put_uint(&it, 6, CRI_CONTAINER_EXITED);
	struct cri_pb_writer w = {.p = msg, .cap = sizeof msg};
	cri_pb_put_bytes(&w, 1, item, it.len);
	struct cri_container c[2];
	size_t n, total;
	assert_int_equal(cri_decode_list_containers_response(msg, w.len, c, 2, &n, &total), 0);
	assert_int_equal(n, 1);
	assert_string_equal(c[0].name, "app");
	assert_int_equal(c[0].attempt, 3);
	assert_int_equal(c[0].state, CRI_CONTAINER_EXITED);
	assert_string_equal(c[0].sandbox_id, "sb1");

	uint8_t st[512];
	struct cri_pb_writer s = {.p = st, .cap = sizeof st};
	cri_pb_put_string(&s, 1, "c1");
	cri_pb_put_bytes(&s, 2, meta, m.len);
	cri_pb_put_uint(&s, 3, CRI_CONTAINER_EXITED);
	cri_pb_put_uint(&s, 5, 1000);
	cri_pb_put_uint(&s, 6, 2000);
	cri_pb_put_varint(&s, 7, (uint64_t)(int64_t)-1); /* int32 -1: ten bytes on the wire */
	cri_pb_put_string(&s, 10, "Error");
	cri_pb_put_string(&s, 15, "/var/log/pods/default_web_uid/app/3.log");
	struct cri_pb_writer r = {.p = msg, .cap = sizeof msg};
	cri_pb_put_bytes(&r, 1, st, s.len);
	cri_pb_put_bytes(&r, 2, "\x0a\x01k\x12\x01v", 6); /* info map: skipped */
	struct cri_container_status cs;
	assert_int_equal(cri_decode_container_status_response(msg, r.len, &cs), 0);
	assert_int_equal(cs.exit_code, -1);
	assert_int_equal(cs.state, CRI_CONTAINER_EXITED);
	assert_true(cs.started_at == 1000 && cs.finished_at == 2000);
	assert_string_equal(cs.reason, "Error");
	assert_string_equal(cs.log_path, "/var/log/pods/default_web_uid/app/3.log");
	assert_int_equal(cri_decode_container_status_response(msg, 0, &cs), -ENODATA);
}

static void test_cri_pb__reader_rejects_malformed(void **state)
{
	(void)state;
	static const struct {
		const char *hex;
	} bad[] = {
	        {"00"},                     /* field 0 */
	        {"0b"},                     /* group start */
	        {"0c"},                     /* group end */
	        {"0e"},                     /* wire type 6 */
	        {"08"},                     /* varint missing */
	        {"08ffffffffffffffffff02"}, /* varint over 64 bits */
	        {"0a05616263"},             /* length past the end */
	        {"0d0102"},                 /* fixed32 cut short */
	        {"0901020304050607"},       /* fixed64 cut short */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		uint8_t b[32];
		long n = hex_decode(bad[i].hex, b, sizeof b);
		struct cri_pb_reader r;
		struct cri_pb_field f;
		cri_pb_reader_init(&r, b, (size_t)n);
		assert_int_equal(cri_pb_next(&r, &f), -EBADMSG);
	}
	uint8_t ok[] = {0x0d, 1, 2, 3, 4, 0x09, 1, 2, 3, 4, 5, 6, 7, 8};
	struct cri_pb_reader r;
	struct cri_pb_field f;
	cri_pb_reader_init(&r, ok, sizeof ok);
	assert_int_equal(cri_pb_next(&r, &f), 1);
	assert_int_equal(f.varint, 0x04030201u);
	assert_int_equal(cri_pb_next(&r, &f), 1);
	assert_true(f.varint == 0x0807060504030201ull);
	assert_int_equal(cri_pb_next(&r, &f), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_cri_encode__golden_vectors),
	        cmocka_unit_test(test_cri_decode__url),
	        cmocka_unit_test(test_cri_decode__sandboxes),
	        cmocka_unit_test(test_cri_decode__containers_and_status),
	        cmocka_unit_test(test_cri_pb__reader_rejects_malformed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
