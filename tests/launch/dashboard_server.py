#!/usr/bin/env python3
"""A stand-in for `cumulus-run --metrics-port` in dashboard_test.sh.

  dashboard_server.py PAGE FIXTURE [BATCH]

Serves, on 127.0.0.1 and a port the kernel picks (printed as the first line
of stdout), PAGE as `GET /`, the fixture's records as
`GET /api/records?after=N` -> {"next": M, "records": [records N..M-1]}, at
most BATCH (default 40) a response so that the page has to poll several times
and append, and the fixture's status as `GET /api/status`. Every API request
is logged on stderr as "records after=N next=M" or "status".
"""
import http.server
import json
import sys
import urllib.parse


def main():
    page = open(sys.argv[1], "rb").read()
    fixture = json.load(open(sys.argv[2], encoding="utf-8"))
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    records, status = fixture["records"], fixture.get("status")

    class Handler(http.server.BaseHTTPRequestHandler):
        def send(self, code, ctype, body):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            url = urllib.parse.urlsplit(self.path)
            if url.path in ("/", "/index.html"):
                return self.send(200, "text/html; charset=utf-8", page)
            if url.path == "/api/records":
                try:
                    after = int(urllib.parse.parse_qs(url.query).get("after", ["0"])[0])
                except ValueError:
                    return self.send(400, "text/plain", b"after must be an integer\n")
                after = max(0, min(after, len(records)))
                nxt = min(len(records), after + batch)
                print("records after=%d next=%d" % (after, nxt), file=sys.stderr, flush=True)
                body = {"next": nxt, "records": records[after:nxt]}
                return self.send(200, "application/json", json.dumps(body).encode())
            if url.path == "/api/status":
                print("status", file=sys.stderr, flush=True)
                return self.send(200, "application/json", json.dumps(status).encode())
            self.send(404, "text/plain", b"not found\n")

        def log_message(self, *args):  # the API requests are logged above
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
