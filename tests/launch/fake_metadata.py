#!/usr/bin/env python3
"""A cloud metadata service for tests: AWS IMDSv2, Azure Scheduled Events or GCP, each strict.

Binds 127.0.0.1 on a free port and prints the port on one line of stdout. Exits on SIGTERM, when
the process that started it goes away, or after --lifetime seconds, whichever comes first.

  aws    PUT /latest/api/token needs X-aws-ec2-metadata-token-ttl-seconds (1..21600) and answers a
         token that lives that long, or --token-lifetime seconds if shorter. Every GET needs a live
         token in X-aws-ec2-metadata-token, or gets 401 (IMDSv2 only: there is no IMDSv1 here).
         spot/instance-action and events/recommendations/rebalance: 404 until the notice.
  azure  GET /metadata/scheduledevents needs "Metadata: true" and api-version=2020-07-01, else 400;
         /metadata/instance/compute/name?…&format=text answers the VM's name. Before the notice,
         Events holds a Freeze for another VM (not ours); after it, a Preempt for this VM.
  gcp    GET /computeMetadata/v1/instance/preempted needs "Metadata-Flavor: Google", else 403;
         FALSE until the notice, then TRUE.

The notice (or, with --rebalance, AWS's rebalance recommendation) is up once the file given by
--notice-when exists; without it, from the start. --misbehave KIND makes the first --times notice
polls answer KIND instead: 401, 403, 500, 503, garbage (a body that does not parse) or hang (no
answer for 3 s). --log appends one line per request: "METHOD PATH STATUS".
"""

import argparse
import json
import os
import secrets
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

AWS_ACTION = "/latest/meta-data/spot/instance-action"
AWS_REBALANCE = "/latest/meta-data/events/recommendations/rebalance"
AZURE_EVENTS = "/metadata/scheduledevents"
AZURE_NAME = "/metadata/instance/compute/name"
GCP_PREEMPTED = "/computeMetadata/v1/instance/preempted"
VM_NAME = "cumulus-vm-7"


class State:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.tokens = {}  # token -> monotonic expiry
        self.notice_polls = 0  # polls of the notice path so far

    def notice_up(self):
        return self.args.notice_when is None or os.path.exists(self.args.notice_when)

    def misbehaviour(self):
        """The misbehaviour for this notice poll, or None."""
        with self.lock:
            self.notice_polls += 1
            if self.args.misbehave and self.notice_polls <= self.args.times:
                return self.args.misbehave
        return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state = None  # set in main()

    def log_message(self, fmt, *args):  # the default writes every request to stderr
        pass

    def answer(self, status, body="", content_type="text/plain"):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        if self.state.args.cloud == "gcp":
            self.send_header("Metadata-Flavor", "Google")
        self.end_headers()
        self.wfile.write(data)
        if self.state.args.log:
            with self.state.lock, open(self.state.args.log, "a") as log:
                log.write(f"{self.command} {self.path} {status}\n")

    def misbehave(self, kind):
        if kind == "hang":
            time.sleep(3)
            self.close_connection = True
            return
        if kind == "garbage":
            self.answer(200, "<html>captive portal</html>", "text/html")
            return
        self.answer(int(kind), "")

    def do_PUT(self):
        path = urlsplit(self.path).path
        if self.state.args.cloud != "aws" or path != "/latest/api/token":
            self.answer(405)
            return
        length = int(self.headers.get("Content-Length", "0"))
        if length:
            self.rfile.read(length)
        ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds", "")
        if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
            self.answer(400)
            return
        token = secrets.token_urlsafe(24)
        life = min(int(ttl), self.state.args.token_lifetime)
        with self.state.lock:
            self.state.tokens[token] = time.monotonic() + life
        self.answer(200, token)

    def do_GET(self):
        url = urlsplit(self.path)
        cloud = self.state.args.cloud
        if cloud == "aws":
            self.aws(url.path)
        elif cloud == "azure":
            self.azure(url.path, parse_qs(url.query))
        else:
            self.gcp(url.path)

    def aws(self, path):
        token = self.headers.get("X-aws-ec2-metadata-token", "")
        with self.state.lock:
            expiry = self.state.tokens.get(token)
        if expiry is None or time.monotonic() >= expiry:
            self.answer(401)
            return
        if path == AWS_ACTION:
            kind = self.state.misbehaviour()
            if kind:
                self.misbehave(kind)
            elif self.state.notice_up() and not self.state.args.rebalance:
                body = {"action": "terminate", "time": "2026-11-23T22:30:00Z"}
                self.answer(200, json.dumps(body), "application/json")
            else:
                self.answer(404)
        elif path == AWS_REBALANCE:
            if self.state.notice_up() and self.state.args.rebalance:
                body = {"noticeTime": "2026-11-23T22:25:00Z"}
                self.answer(200, json.dumps(body), "application/json")
            else:
                self.answer(404)
        else:
            self.answer(404)

    def azure(self, path, query):
        if self.headers.get("Metadata") != "true":
            self.answer(400, json.dumps({"error": "Bad request. Required metadata header not specified"}))
            return
        if path == AZURE_NAME:
            if "api-version" not in query or query.get("format") != ["text"]:
                self.answer(400)
            else:
                self.answer(200, VM_NAME)
            return
        if path != AZURE_EVENTS:
            self.answer(404)
            return
        if query.get("api-version") != ["2020-07-01"]:
            self.answer(400, json.dumps({"error": "Bad request. api-version is invalid"}))
            return
        kind = self.state.misbehaviour()
        if kind:
            self.misbehave(kind)
            return
        other = {"EventId": "A1B2", "EventType": "Freeze", "ResourceType": "VirtualMachine",
                 "Resources": ["another-vm"], "EventStatus": "Scheduled",
                 "NotBefore": "Mon, 23 Nov 2026 22:40:00 GMT", "Description": "",
                 "EventSource": "Platform", "DurationInSeconds": 5}
        events = [other]
        if self.state.notice_up():
            events.append({"EventId": "C3D4", "EventType": "Preempt",
                           "ResourceType": "VirtualMachine", "Resources": [VM_NAME],
                           "EventStatus": "Scheduled", "NotBefore": "Mon, 23 Nov 2026 22:30:30 GMT",
                           "Description": "", "EventSource": "Platform",
                           "DurationInSeconds": -1})
        body = {"DocumentIncarnation": len(events), "Events": events}
        self.answer(200, json.dumps(body), "application/json")

    def gcp(self, path):
        if self.headers.get("Metadata-Flavor") != "Google":
            self.answer(403, "Missing Metadata-Flavor:Google header.")
            return
        if path != GCP_PREEMPTED:
            self.answer(404)
            return
        kind = self.state.misbehaviour()
        if kind:
            self.misbehave(kind)
            return
        self.answer(200, "TRUE" if self.state.notice_up() else "FALSE")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cloud", choices=["aws", "azure", "gcp"], required=True)
    parser.add_argument("--notice-when", help="the notice is up once this file exists")
    parser.add_argument("--rebalance", action="store_true",
                        help="aws: the notice is a rebalance recommendation")
    parser.add_argument("--token-lifetime", type=float, default=21600)
    parser.add_argument("--misbehave", choices=["401", "403", "500", "503", "garbage", "hang"])
    parser.add_argument("--times", type=int, default=3)
    parser.add_argument("--lifetime", type=float, default=300)
    parser.add_argument("--log")
    args = parser.parse_args()

    Handler.state = State(args)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)

    parent = os.getppid()
    deadline = time.monotonic() + args.lifetime

    def watch():
        while os.getppid() == parent and time.monotonic() < deadline:
            time.sleep(0.2)
        server.shutdown()

    threading.Thread(target=watch, daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve_forever(poll_interval=0.1)
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
