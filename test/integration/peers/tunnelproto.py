"""The KubeEdge tunnel wire format and our extensions (stream/PROTOCOL.md), for the test peers.

Messages: uvarint(ConnectID) uvarint(type) payload. uvarint is Go's binary.PutUvarint.
"""
import json

LOGS, EXEC, METRIC, DATA, REMOVE, CLOSE, ATTACH = 0, 1, 2, 3, 4, 5, 6
HELLO, WINDOW, HALF_CLOSE, ERROR, TCP_CONNECT = 64, 65, 66, 67, 68
CONNECT_TYPES = (LOGS, EXEC, METRIC, ATTACH)
EXT_HEADER = "X-Cloudstream-Tunnel"


def uvarint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def read_uvarint(b, i):
    x = shift = 0
    for k in range(10):
        if i >= len(b):
            raise ValueError("truncated uvarint")
        c = b[i]
        i += 1
        if k == 9 and c > 1:
            raise ValueError("uvarint overflows 64 bits")
        x |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return x, i
    raise ValueError("uvarint longer than 10 bytes")


def encode(cid, typ, payload=b""):
    return uvarint(cid) + uvarint(typ) + payload


def decode(msg):
    cid, i = read_uvarint(msg, 0)
    typ, i = read_uvarint(msg, i)
    return cid, typ, msg[i:]


def parse_offer(value):
    """'v=1; caps=a,b; window=N; replica=x' -> dict (caps as a set)."""
    out = {"caps": set()}
    for part in value.split(";"):
        if "=" not in part:
            continue
        k, v = (x.strip() for x in part.split("=", 1))
        out[k] = set(c.strip() for c in v.split(",") if c.strip()) if k == "caps" else v
    return out


def connect_request(payload):
    """Go's JSON of KubeEdge's connect struct -> (method, path, raw query, [(name, value)])."""
    j = json.loads(payload)
    url = j["url"]
    headers = []
    for name, values in (j.get("header") or {}).items():
        for v in values:
            headers.append((name, v))
    return j.get("method") or "GET", url["Path"], url.get("RawQuery", ""), headers


def request_head(method, path, query, headers, host):
    target = path + ("?" + query if query else "")
    lines = ["%s %s HTTP/1.1" % (method, target)]
    if not any(k.lower() == "host" for k, _ in headers):
        lines.append("Host: %s" % host)
    lines += ["%s: %s" % (k, v) for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


if __name__ == "__main__":
    # Self-test: the golden vector of the spec and a JSON round trip.
    assert encode(300, DATA) == bytes.fromhex("ac0203")
    assert decode(bytes.fromhex("ac0203") + b"x") == (300, DATA, b"x")
    ex = ('{"MessID":7,"url":{"Scheme":"http","Opaque":"","User":null,"Host":"127.0.0.1:10350",'
          '"Path":"/exec/default/nginx/nginx","RawPath":"","OmitHost":false,"ForceQuery":false,'
          '"RawQuery":"command=sh\\u0026input=1\\u0026output=1\\u0026tty=1","Fragment":"",'
          '"RawFragment":""},"header":{"Connection":["Upgrade"],"Upgrade":["SPDY/3.1"],'
          '"X-Stream-Protocol-Version":["v4.channel.k8s.io","v3.channel.k8s.io"]},'
          '"method":"POST"}')
    m, p, q, h = connect_request(ex)
    assert (m, p, q) == ("POST", "/exec/default/nginx/nginx",
                         "command=sh&input=1&output=1&tty=1"), (m, p, q)
    assert ("X-Stream-Protocol-Version", "v3.channel.k8s.io") in h
    print("tunnelproto: ok")
