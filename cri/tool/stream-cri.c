/*
 * cri/tool/stream-cri.c — a small CRI client for operators and tests: ask the container runtime
 * what edgestream's CRI backend would ask it.
 *
 *   stream-cri [--socket PATH] [--timeout MS] COMMAND [ARGS]
 *     version                              runtime name, version and CRI API version
 *     sandboxes [NAMESPACE [POD]]          pod sandboxes (by the kubelet's labels)
 *     containers [SANDBOX_ID [NAME]]       containers
 *     status CONTAINER_ID                  state, exit code, log path
 *     exec-url CONTAINER_ID CMD [ARG...]   a streaming URL for exec (stdin, stdout, stderr)
 *     attach-url CONTAINER_ID              a streaming URL for attach (stdout, stderr)
 *     port-forward-url SANDBOX_ID [PORT...]
 *     run-pod NS POD UID LOG_DIR           a host-network pod sandbox; prints its id
 *     create-container NS POD UID LOG_DIR SANDBOX_ID NAME IMAGE [--attempt N] [--stdin] [--tty]
 *                      [-- CMD...]         create and start a container (log NAME/N.log)
 *     stop-container CONTAINER_ID          stop it now
 *     reopen-log CONTAINER_ID              the runtime reopens the log file (after a rotation)
 *     remove-pod SANDBOX_ID                stop and remove its containers, then the sandbox
 *
 * Exit status: 0 success, 1 the call failed (the runtime's message on stderr), 2 usage.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include <cri/client.h>
#include <cri/messages.h>

#define DEFAULT_SOCKET "/run/containerd/containerd.sock"

static const char *const container_states[] = {"CREATED", "RUNNING", "EXITED", "UNKNOWN"};

static const char *cstate(int s)
{
	return s >= 0 && s < 4 ? container_states[s] : "?";
}

static int usage(void)
{
	fprintf(stderr,
	        "usage: stream-cri [--socket PATH] [--timeout MS] COMMAND [ARGS]\n"
	        "  version | sandboxes [NS [POD]] | containers [SANDBOX [NAME]] | status ID |\n"
	        "  exec-url ID CMD [ARG...] | attach-url ID | port-forward-url SANDBOX [PORT...] "
	        "|\n"
	        "  run-pod NS POD UID LOG_DIR | remove-pod SANDBOX | stop-container ID |\n"
	        "  reopen-log ID |\n"
	        "  create-container NS POD UID LOG_DIR SANDBOX NAME IMAGE [--attempt N] [--stdin]\n"
	        "                   [--tty] [-- CMD...]\n"
	        "socket default %s\n",
	        DEFAULT_SOCKET);
	return 2;
}

static int run(struct cri_client *c, int argc, char **argv)
{
	char err[1024] = "";
	char url[CRI_URL_MAX];
	int rc;
	const char *cmd = argv[0];
	if (strcmp(cmd, "version") == 0 && argc == 1) {
		struct cri_version v;
		if ((rc = cri_version(c, &v, err, sizeof err)) == 0)
			printf("runtime %s %s, CRI API %s\n", v.runtime_name, v.runtime_version,
			       v.runtime_api_version);
	} else if (strcmp(cmd, "sandboxes") == 0 && argc <= 3) {
		struct cri_label l[2];
		size_t nl = 0, n;
		if (argc > 1)
			l[nl++] = (struct cri_label){CRI_LABEL_POD_NAMESPACE, argv[1]};
		if (argc > 2)
			l[nl++] = (struct cri_label){CRI_LABEL_POD_NAME, argv[2]};
		static struct cri_sandbox sb[256];
		if ((rc = cri_list_sandboxes(c, l, nl, -1, sb, 256, &n, err, sizeof err)) == 0)
			for (size_t i = 0; i < n; i++)
				printf("%s %s/%s uid=%s attempt=%u %s\n", sb[i].id,
				       sb[i].namespace_, sb[i].name, sb[i].uid, sb[i].attempt,
				       sb[i].state == CRI_SANDBOX_READY ? "READY" : "NOTREADY");
	} else if (strcmp(cmd, "containers") == 0 && argc <= 3) {
		struct cri_label l[1];
		size_t nl = 0, n;
		if (argc > 2)
			l[nl++] = (struct cri_label){CRI_LABEL_CONTAINER_NAME, argv[2]};
		static struct cri_container ct[256];
		if ((rc = cri_list_containers(c, argc > 1 ? argv[1] : NULL, l, nl, -1, ct, 256, &n,
		                              err, sizeof err)) == 0)
			for (size_t i = 0; i < n; i++)
				printf("%s sandbox=%s %s attempt=%u %s\n", ct[i].id,
				       ct[i].sandbox_id, ct[i].name, ct[i].attempt,
				       cstate(ct[i].state));
	} else if (strcmp(cmd, "status") == 0 && argc == 2) {
		static struct cri_container_status s;
		if ((rc = cri_container_status(c, argv[1], &s, err, sizeof err)) == 0)
			printf("%s %s attempt=%u %s exit=%d reason=%s log=%s\n", s.id, s.name,
			       s.attempt, cstate(s.state), s.exit_code, s.reason, s.log_path);
	} else if (strcmp(cmd, "exec-url") == 0 && argc >= 3) {
		if ((rc = cri_exec_url(c, argv[1], (const char *const *)argv + 2, (size_t)argc - 2,
		                       false, true, true, true, url, sizeof url, err,
		                       sizeof err)) == 0)
			printf("%s\n", url);
	} else if (strcmp(cmd, "attach-url") == 0 && argc == 2) {
		if ((rc = cri_attach_url(c, argv[1], false, false, true, true, url, sizeof url, err,
		                         sizeof err)) == 0)
			printf("%s\n", url);
	} else if (strcmp(cmd, "port-forward-url") == 0 && argc >= 2 && argc <= 34) {
		int32_t ports[32];
		for (int i = 2; i < argc; i++) {
			char *end;
			long p = strtol(argv[i], &end, 10);
			if (*end || p < 1 || p > 65535)
				return usage();
			ports[i - 2] = (int32_t)p;
		}
		if ((rc = cri_port_forward_url(c, argv[1], ports, (size_t)argc - 2, url, sizeof url,
		                               err, sizeof err)) == 0)
			printf("%s\n", url);
	} else if (strcmp(cmd, "run-pod") == 0 && argc == 5) {
		struct cri_pod_spec pod = {argv[2], argv[3], argv[1], argv[4]};
		char id[CRI_ID_MAX + 1];
		if ((rc = cri_run_pod_sandbox(c, &pod, id, sizeof id, err, sizeof err)) == 0)
			printf("%s\n", id);
	} else if (strcmp(cmd, "create-container") == 0 && argc >= 8) {
		struct cri_pod_spec pod = {argv[2], argv[3], argv[1], argv[4]};
		char log_path[CRI_NAME_MAX + 16];
		struct cri_container_spec spec = {.name = argv[6], .image = argv[7]};
		int i = 8;
		for (; i < argc; i++) {
			if (strcmp(argv[i], "--attempt") == 0 && i + 1 < argc) {
				char *end;
				unsigned long a = strtoul(argv[++i], &end, 10);
				if (*end || a > UINT32_MAX)
					return usage();
				spec.attempt = (uint32_t)a;
			} else if (strcmp(argv[i], "--stdin") == 0)
				spec.stdin_ = true;
			else if (strcmp(argv[i], "--tty") == 0)
				spec.tty = true;
			else if (strcmp(argv[i], "--") == 0)
				break;
			else
				return usage();
		}
		/* The kubelet's layout: <container>/<attempt>.log under the pod's directory. */
		snprintf(log_path, sizeof log_path, "%s/%u.log", argv[6], spec.attempt);
		spec.log_path = log_path;
		if (i < argc) {
			spec.command = (const char *const *)argv + i + 1;
			spec.ncommand = (size_t)(argc - i - 1);
		}
		char id[CRI_ID_MAX + 1];
		if ((rc = cri_create_container(c, argv[5], &pod, &spec, id, sizeof id, err,
		                               sizeof err)) == 0 &&
		    (rc = cri_start_container(c, id, err, sizeof err)) == 0)
			printf("%s\n", id);
	} else if (strcmp(cmd, "stop-container") == 0 && argc == 2) {
		rc = cri_stop_container(c, argv[1], 0, err, sizeof err);
	} else if (strcmp(cmd, "reopen-log") == 0 && argc == 2) {
		rc = cri_reopen_container_log(c, argv[1], err, sizeof err);
	} else if (strcmp(cmd, "remove-pod") == 0 && argc == 2) {
		static struct cri_container ct[256];
		size_t n = 0;
		rc = cri_list_containers(c, argv[1], NULL, 0, -1, ct, 256, &n, err, sizeof err);
		for (size_t i = 0; rc == 0 && i < n; i++) {
			rc = cri_stop_container(c, ct[i].id, 0, err, sizeof err);
			if (rc == 0)
				rc = cri_remove_container(c, ct[i].id, err, sizeof err);
		}
		if (rc == 0)
			rc = cri_stop_pod_sandbox(c, argv[1], err, sizeof err);
		if (rc == 0)
			rc = cri_remove_pod_sandbox(c, argv[1], err, sizeof err);
	} else {
		return usage();
	}
	if (rc < 0) {
		fprintf(stderr, "stream-cri: %s\n", err[0] ? err : strerror(-rc));
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *sock = DEFAULT_SOCKET;
	unsigned long timeout = 10000;
	int i = 1;
	for (; i < argc && argv[i][0] == '-'; i++) {
		if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc) {
			sock = argv[++i];
		} else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) {
			char *end;
			timeout = strtoul(argv[++i], &end, 10);
			if (*end || timeout == 0)
				return usage();
		} else if (strcmp(argv[i], "--help") == 0) {
			usage();
			return 0;
		} else {
			return usage();
		}
	}
	if (i >= argc)
		return usage();
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		return 1;
	struct cri_client *c;
	int rc = cri_client_new(&c, sock, timeout);
	if (rc < 0) {
		fprintf(stderr, "stream-cri: %s\n", strerror(-rc));
		curl_global_cleanup();
		return 1;
	}
	rc = run(c, argc - i, argv + i);
	cri_client_free(c);
	curl_global_cleanup();
	return rc;
}
