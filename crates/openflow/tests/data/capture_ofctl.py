#!/usr/bin/env python3
"""A recording OpenFlow 1.0 peer for capturing what ovs-ofctl sends (test vectors).

Usage: capture_ofctl.py SOCK OUT -- ovs-ofctl ARGS...  (the word SOCK in ARGS becomes unix:SOCK)
Listens on unix:SOCK, answers HELLO (1.0), BARRIER_REQUEST, and Nicira stats requests with
an empty reply of the same subtype; writes every other frame ovs-ofctl sent, one hex line
each, to OUT.
"""
import os, socket, struct, subprocess, sys, threading

def main():
    sock, out = sys.argv[1], sys.argv[2]
    cmd = [a.replace("SOCK", "unix:" + sock) for a in sys.argv[4:]]
    if os.path.exists(sock):
        os.unlink(sock)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(sock)
    srv.listen(1)
    frames = []

    def serve():
        c, _ = srv.accept()
        c.sendall(struct.pack("!BBHI", 1, 0, 8, 1))
        buf = b""
        while True:
            d = c.recv(65536)
            if not d:
                return
            buf += d
            while len(buf) >= 8:
                ver, typ, ln, xid = struct.unpack("!BBHI", buf[:8])
                if len(buf) < ln:
                    break
                f, buf = buf[:ln], buf[ln:]
                if typ == 0:
                    continue
                if typ == 18:
                    c.sendall(struct.pack("!BBHI", 1, 19, 8, xid))
                    continue
                frames.append(f)
                if typ == 16 and struct.unpack("!H", f[8:10])[0] == 0xffff:
                    sub = struct.unpack("!I", f[16:20])[0]
                    body = struct.pack("!HHII", 0xffff, 0, 0x2320, sub) + b"\0" * 4
                    if sub == 1:
                        body += b"\0" * 24
                    c.sendall(struct.pack("!BBHI", 1, 17, 8 + len(body), xid) + body)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    t.join(2)
    with open(out, "a") as o:
        for f in frames:
            o.write(f.hex() + "\n")
    sys.stderr.write(r.stderr)
    sys.stdout.write(r.stdout)

main()
