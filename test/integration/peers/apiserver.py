"""nginx playing kube-apiserver for the end-to-end tests (the lab's apiserver.sh, lab README §4),
used in-process: TLS with client certificates required; /version, /api, /apis, /api/v1; GET of
the pods added with add_pod() (a NotFound Status otherwise); and the rewrite of
pods/{exec,attach,portforward,log} and nodes/N/proxy/* to the kubelet side, as
kube-apiserver's pkg/registry/core/pod/strategy.go does it. The kubelet side (cloudstream's
stream port) is reached over TLS with the apiserver's kubelet client certificate, verified
against the CA given. Writes a kubeconfig for kubectl.

What reaches kubectl of a kubelet-side error follows kube-apiserver (v1.26.0, the same in
v1.33.0; cloudstream/README.md "What kubectl shows" has the table):
  - pods/log: kube-apiserver's own client reads the kubelet's answer and, for a status outside
    200..206, answers with a Status of its own whose message is the kubelet's body for some
    statuses and generic text for the others (apiserver pkg/registry/generic/rest/
    response_checker.go:47-67 GenericHttpResponseChecker.Check, apimachinery pkg/api/errors/
    errors.go:435-523 NewGenericServerResponse; kubernetes pkg/registry/core/pod/rest/log.go
    LogREST.Get). Modelled exactly by the njs filters in apiserver_podlog.js.
  - exec, attach, portforward: an answer >= 400 to the upgrade is written back as it came
    (apimachinery pkg/util/proxy/upgradeaware.go:363 and :386-394, tryUpgrade): passed through.
  - nodes/N/proxy/*: passed through (upgradeaware.go:213-293 ServeHTTP, httputil.ReverseProxy).

    api = Apiserver(dir, kubelet_port, pki)      # pki: see Apiserver.__init__
    api.add_pod("default", "demo", ["loop", "shell"], tty=["shell"])
    api.start()                                  # api.port, api.kubeconfig
    ...
    api.stop()

Everything lives under DIR/apiserver (config, logs, temp dirs, pod files). nginx runs as one
process (master_process off) so the PID we hold is the process that serves, dies with the test
(PR_SET_PDEATHSIG) and is stopped by that PID; Debian's /usr/sbin/nginx (deploy/install-deps.sh).
"""
import json
import os
import signal
import subprocess
import time

from containerd import free_port  # noqa: F401 - also the quick start's

NGINX = "/usr/sbin/nginx"
NJS_MODULE = "/usr/lib/nginx/modules/ngx_http_js_module.so"  # Debian's libnginx-mod-http-js
PEERS = os.path.dirname(os.path.abspath(__file__))

# A flag reaches the kubelet only when true (Go's strconv.ParseBool spellings), renamed
# stdin/stdout/stderr -> input/output/error, keys sorted (url.Values.Encode), command repeated
# in order. Only the first ports= is used (the real one joins them with commas).
TRUE = '"~^(1|t|T|true|True|TRUE)$"'
NGINX_CONF = """# written by test/integration/peers/apiserver.py: kube-apiserver stand-in
load_module @NJS@;
master_process off;
daemon off;
pid @A@/pid;
error_log @A@/logs/error.log info;
events { worker_connections 1024; }
http {
  client_body_temp_path @A@/tmp/body; proxy_temp_path @A@/tmp/proxy;
  fastcgi_temp_path @A@/tmp/fastcgi; uwsgi_temp_path @A@/tmp/uwsgi; scgi_temp_path @A@/tmp/scgi;
  default_type application/json;
  log_format k8s escape=json '{"request":"$request","status":"$status",'
    '"kubelet_uri":"$kubelet_uri","upgrade":"$http_upgrade",'
    '"sec_websocket_protocol":"$http_sec_websocket_protocol",'
    '"x_stream_protocol_version":"$http_x_stream_protocol_version",'
    '"resp_x_stream_protocol_version":"$upstream_http_x_stream_protocol_version",'
    '"ua":"$http_user_agent","client_dn":"$ssl_client_s_dn","request_time":"$request_time"}';
  access_log @A@/logs/access.log k8s;
  js_import podlog from @PEERS@/apiserver_podlog.js;
  map $http_upgrade $connection_upgrade { default Upgrade; '' close; }

  map $args $q_cmd { "~(?:^|&)(?<c>command=[^&]*(?:&command=[^&]*)*)" "&$c"; default ""; }
  map $arg_stderr $q_err { @TRUE@ "&error=1";  default ""; }
  map $arg_stdin  $q_in  { @TRUE@ "&input=1";  default ""; }
  map $arg_stdout $q_out { @TRUE@ "&output=1"; default ""; }
  map $arg_tty    $q_tty { @TRUE@ "&tty=1";    default ""; }
  map "$q_cmd$q_err$q_in$q_out$q_tty" $stream_qs { "" ""; "~^&(?<q>.*)$" "?$q"; }
  map $arg_ports $pf_qs { "" ""; default "?port=$arg_ports"; }
  map $arg_follow       $l1 { @TRUE@ "&follow=true"; default ""; }
  map $arg_limitBytes   $l2 { "" ""; default "&limitBytes=$arg_limitBytes"; }
  map $arg_previous     $l3 { @TRUE@ "&previous=true"; default ""; }
  map $arg_sinceSeconds $l4 { "" ""; default "&sinceSeconds=$arg_sinceSeconds"; }
  map $arg_sinceTime    $l5 { "" ""; default "&sinceTime=$arg_sinceTime"; }
  map $arg_tailLines    $l6 { "" ""; default "&tailLines=$arg_tailLines"; }
  map $arg_timestamps   $l7 { @TRUE@ "&timestamps=true"; default ""; }
  map "$l1$l2$l3$l4$l5$l6$l7" $log_qs { "" ""; "~^&(?<q>.*)$" "?$q"; }

  proxy_http_version 1.1; proxy_buffering off; proxy_request_buffering off;
  proxy_connect_timeout 10s; proxy_read_timeout 4h; proxy_send_timeout 4h;
  upstream kubelet { server 127.0.0.1:@KPORT@; }
  # Toward the kubelet side: TLS 1.2/1.3 (nginx 1.22 stops at 1.2 by default), no SNI, the
  # apiserver's kubelet client certificate, the server verified against @KCA@. nginx 1.22
  # checks DNS SANs only, so the name checked is "localhost".
  proxy_ssl_protocols TLSv1.2 TLSv1.3;
  proxy_ssl_certificate @KCERT@; proxy_ssl_certificate_key @KKEY@;
  proxy_ssl_verify on; proxy_ssl_verify_depth 4;
  proxy_ssl_trusted_certificate @KCA@; proxy_ssl_name localhost;

  server {
    listen 127.0.0.1:@PORT@ ssl;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_certificate @CERT@; ssl_certificate_key @KEY@;
    ssl_client_certificate @CLIENT_CA@; ssl_verify_client on;
    set $kubelet_uri "";
    error_page 502 504 @kubelet_down;
    location @kubelet_down { return 502 '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"test apiserver: kubelet backend 127.0.0.1:@KPORT@ unreachable","reason":"ServiceUnavailable","code":502}'; }
    location = /version { return 200 '{"major":"1","minor":"@MINOR@","gitVersion":"v1.@MINOR@.0-e2e","platform":"linux/amd64"}'; }
    location = /api     { return 200 '{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[{"clientCIDR":"0.0.0.0/0","serverAddress":"127.0.0.1:@PORT@"}]}'; }
    location = /apis    { return 200 '{"kind":"APIGroupList","apiVersion":"v1","groups":[]}'; }
    location = /api/v1  { return 200 '{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"pods","singularName":"pod","namespaced":true,"kind":"Pod","verbs":["get"],"shortNames":["po"]}]}'; }
    location ~ ^/api/v1/namespaces/(?<ns>[^/]+)/pods/(?<pod>[^/]+)$ {
      root @A@/pods; try_files /${ns}_${pod}.json @no_pod;
    }
    location @no_pod { return 404 '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \\\\"$pod\\\\" not found","reason":"NotFound","details":{"name":"$pod","kind":"pods"},"code":404}'; }
    # Upgrades: the client's request passed on (method, Host, kubectl's headers) to the new
    # target, X-Forwarded-For added, Authorization dropped. A non-101 answer >= 400 comes back
    # as it came (upgradeaware.go:386-394); the apiserver's 500 for an answer < 400 that is not
    # a 101 (upgradeaware.go:363) is not modelled: no kubelet side of ours answers that.
    location ~ ^/api/v1/namespaces/(?<ns>[^/]+)/pods/(?<pod>[^/]+)/(?<sub>exec|attach)$ {
      set $kubelet_uri "/$sub/$ns/$pod/$arg_container$stream_qs";
      proxy_pass https://kubelet$kubelet_uri;
      proxy_set_header Host $http_host; proxy_set_header X-Forwarded-For $remote_addr;
      proxy_set_header Authorization ""; proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection $connection_upgrade;
    }
    location ~ ^/api/v1/namespaces/(?<ns>[^/]+)/pods/(?<pod>[^/]+)/portforward$ {
      set $kubelet_uri "/portForward/$ns/$pod$pf_qs";
      proxy_pass https://kubelet$kubelet_uri;
      proxy_set_header Host $http_host; proxy_set_header X-Forwarded-For $remote_addr;
      proxy_set_header Authorization ""; proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection $connection_upgrade;
    }
    # Logs: the apiserver's own client; only Host, User-Agent and Accept-Encoding. An answer
    # outside 200..206 becomes kube-apiserver's own Status (GenericHttpResponseChecker,
    # response_checker.go:47-67): the body is kept only for 400, 403, 406, 415, 500 and the
    # other 5xx than 503/504 (apiserver_podlog.js).
    location ~ ^/api/v1/namespaces/(?<ns>[^/]+)/pods/(?<pod>[^/]+)/log$ {
      set $kubelet_uri "/containerLogs/$ns/$pod/$arg_container$log_qs";
      proxy_pass https://kubelet$kubelet_uri;
      proxy_pass_request_headers off;
      proxy_set_header Host "127.0.0.1:@KPORT@"; proxy_set_header User-Agent "Go-http-client/1.1";
      proxy_set_header Accept-Encoding gzip;
      js_header_filter podlog.header_filter;
      js_body_filter podlog.body_filter buffer_type=buffer;
    }
    # Node proxy: the path after /proxy; X-Forwarded-Uri is the API path without the query.
    # Every answer passes through (httputil.ReverseProxy, upgradeaware.go:293).
    location ~ ^/api/v1/nodes/(?<node>[^/]+)/proxy(?<npath>/.*)$ {
      set $kubelet_uri "$npath$is_args$args";
      proxy_pass https://kubelet$kubelet_uri;
      proxy_set_header Host $http_host; proxy_set_header X-Forwarded-For $remote_addr;
      proxy_set_header Authorization ""; proxy_set_header X-Forwarded-Uri $uri;
    }
    location / { return 404 '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}'; }
  }
}
"""

KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- {name: e2e, cluster: {server: "https://127.0.0.1:%(port)d", certificate-authority: "%(ca)s"}}
users:
- {name: admin, user: {client-certificate: "%(cert)s", client-key: "%(key)s"}}
contexts:
- {name: e2e, context: {cluster: e2e, user: admin, namespace: default}}
current-context: e2e
"""


class Apiserver:
    def __init__(self, base, kubelet_port, pki, node="lab-node", minor=32,
                 image="localhost/busybox:1.35"):
        """@pki: paths of "cert"/"key" (serving, IP 127.0.0.1), "client_ca" (kubectl's client
        certificates), "admin_cert"/"admin_key" (put in the kubeconfig), "ca" (verifies "cert";
        put in the kubeconfig), "kubelet_cert"/"kubelet_key" (shown to the kubelet side),
        "kubelet_ca" (verifies the kubelet side, whose certificate must name localhost)."""
        self.dir = os.path.join(base, "apiserver")
        self.kubelet_port = kubelet_port
        self.pki = pki
        self.node = node
        self.minor = minor
        self.image = image
        self.port = free_port()  # chosen early: cloudstream's --apiserver-url needs it
        self.kubeconfig = os.path.join(base, "kubeconfig")
        self.proc = None
        for sub in ("logs", "tmp", "pods"):
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)

    def add_pod(self, ns, name, containers, tty=(), uid=None, node=None):
        """Writes the pod object (host network, on @node, default ours); read by nginx per
        request, so pods may be added while it runs. The first container is the default one."""
        pod = {"kind": "Pod", "apiVersion": "v1",
               "metadata": {"name": name, "namespace": ns, "uid": uid or name + "-uid-1",
                            "resourceVersion": "1",
                            "creationTimestamp": "2026-01-01T00:00:00Z",
                            "annotations": {
                                "kubectl.kubernetes.io/default-container": containers[0]}},
               "spec": {"nodeName": node or self.node, "hostNetwork": True,
                        "containers": [{"name": c, "image": self.image, "stdin": True,
                                        "tty": c in tty} for c in containers]},
               "status": {"phase": "Running", "hostIP": "127.0.0.1", "podIP": "127.0.0.1",
                          "containerStatuses": [
                              {"name": c, "ready": True, "started": True, "restartCount": 0,
                               "image": self.image, "imageID": "",
                               "state": {"running": {}}} for c in containers]}}
        with open(os.path.join(self.dir, "pods", "%s_%s.json" % (ns, name)), "w") as f:
            json.dump(pod, f)

    def _write_config(self):
        p = self.pki
        conf = NGINX_CONF
        for k, v in (("@A@", self.dir), ("@PORT@", str(self.port)),
                     ("@KPORT@", str(self.kubelet_port)), ("@MINOR@", str(self.minor)),
                     ("@TRUE@", TRUE), ("@NJS@", NJS_MODULE), ("@PEERS@", PEERS),
                     ("@CERT@", p["cert"]), ("@KEY@", p["key"]),
                     ("@CLIENT_CA@", p["client_ca"]), ("@KCERT@", p["kubelet_cert"]),
                     ("@KKEY@", p["kubelet_key"]), ("@KCA@", p["kubelet_ca"])):
            conf = conf.replace(k, v)
        self.conf = os.path.join(self.dir, "nginx.conf")
        with open(self.conf, "w") as f:
            f.write(conf)
        with open(self.kubeconfig, "w") as f:
            f.write(KUBECONFIG % {"port": self.port, "ca": p["ca"], "cert": p["admin_cert"],
                                  "key": p["admin_key"]})

    def _argv(self):
        return [NGINX, "-p", self.dir, "-e", os.path.join(self.dir, "logs", "error.log"),
                "-c", self.conf]

    def start(self, timeout=10.0, keep=False):
        """@keep: nginx outlives this process (the quick start); stop it by its pid file."""
        self._write_config()
        t = subprocess.run(self._argv() + ["-t", "-q"], capture_output=True)
        if t.returncode != 0:
            raise RuntimeError("nginx -t: %s" % t.stderr.decode(errors="replace"))
        pid_file = os.path.join(self.dir, "pid")
        if os.path.exists(pid_file):
            os.unlink(pid_file)
        self.log = open(os.path.join(self.dir, "logs", "nginx.out"), "wb")

        def child():
            import ctypes
            os.setsid()
            if not keep:
                ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG

        self.proc = subprocess.Popen(self._argv(), stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, preexec_fn=child)
        # nginx binds its listeners before it writes the pid file
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("nginx exited %s: %s" % (self.proc.returncode, self.tail()))
            if os.path.exists(pid_file) and os.path.getsize(pid_file) > 0:
                return self
            time.sleep(0.02)
        raise RuntimeError("nginx not ready: " + self.tail())

    def stop(self):
        """TERM (fast shutdown: open streams are cut), KILL after 5 s."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        rc, self.proc = self.proc.returncode, None
        return rc

    def access_log(self):
        """One dict per request (log_format k8s above), oldest first."""
        path = os.path.join(self.dir, "logs", "access.log")
        if not os.path.exists(path):
            return []
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]

    def tail(self, n=20):
        out = []
        for name in ("nginx.out", "error.log"):
            try:
                with open(os.path.join(self.dir, "logs", name), "rb") as f:
                    out += f.read().splitlines()[-n:]
            except OSError:
                pass
        return b"\n".join(out).decode(errors="replace")
