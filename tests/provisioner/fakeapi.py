# SPDX-License-Identifier: Apache-2.0
"""A fake Kubernetes API server for flexvol-provisioner's integration test.

It speaks the wire format the provisioner sees from a real kube-apiserver:

- lists: {"kind":"...List","apiVersion":"v1","metadata":{"resourceVersion":"N",
  "continue":"..."},"items":[...]}, paged with ?limit= and ?continue=; an
  expired continue token is HTTP 410 with a Status body (reason "Expired");
- watches: ?watch=1&resourceVersion=N, HTTP/1.1 chunked, one
  {"type":"ADDED|MODIFIED|DELETED|BOOKMARK|ERROR","object":{...}} per line;
  a resourceVersion older than the compaction point is answered as the real
  server does: HTTP 200 and one ERROR event whose object is a Status with
  code 410, reason "Expired", then the stream ends; timeoutSeconds ends it;
- GET of one object, 404 with a Status (reason "NotFound");
- POST, 201 with the stored object (uid, resourceVersion, creationTimestamp
  set), 409 with a Status (reason "AlreadyExists");
- DELETE with DeleteOptions.preconditions.uid: 200, 404, 409 (Conflict); an
  object with finalizers only gets a deletionTimestamp (200 with the object)
  and goes when an update leaves it without finalizers;
- PUT (update) with optimistic concurrency on resourceVersion (409);
- a bearer token check (401) when a token is configured; HTTPS when a
  certificate is given.

A small PV controller is built in (the part provisioning relies on), as the
controller-manager's does it:
- a pending claim with a StorageClass is first matched against Available PVs
  (same class, enough capacity, the access modes; a claim with a selector
  matches none here); a match is bound.  Only when nothing matched, and for a
  WaitForFirstConsumer class only once volume.kubernetes.io/selected-node is
  set, it hands the claim to the class's provisioner: the annotations
  volume.kubernetes.io/storage-provisioner and its beta twin.  Claims that
  carry either annotation already are left as they are.  cm_paused holds
  that back (the controller-manager has not seen the claim yet);
  cm_resume() catches up;
- a PV whose claimRef names an existing pending claim by uid binds it (both
  become Bound); deleting a claim makes its bound PV Released;
- a new PV whose claimRef names, by uid, a claim whose volumeName is that PV
  binds it again (what `migrate` relies on); with lose_claims, deleting a
  bound PV first makes its claim Lost.

Test hooks (called from the test, in-process): expire_next_watches(),
inject_watch_error(), drop_watches(), race_next_pv_create, stall_pv_create.
"""

import base64
import json
import random
import ssl
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

KINDS = {
    # path prefix -> (kind, namespaced)
    "persistentvolumeclaims": ("PersistentVolumeClaim", True),
    "persistentvolumes": ("PersistentVolume", False),
    "storageclasses": ("StorageClass", False),
    "events": ("Event", True),
    "nodes": ("Node", False),
    "configmaps": ("ConfigMap", True),
    "leases": ("Lease", True),  # coordination.k8s.io/v1
    # what migrate reads besides PVs and claims (its check that nothing uses the volume)
    "pods": ("Pod", True),
    "volumeattachments": ("VolumeAttachment", False),  # storage.k8s.io/v1
}


def status(code, reason, message, details=None):
    s = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
         "message": message, "reason": reason, "code": code}
    if details:
        s["details"] = details
    return s


def now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Store:
    def __init__(self):
        self.lock = threading.Condition()
        self.rv = 100
        self.objs = {k: {} for k in KINDS}  # kind -> {(ns, name): obj}
        self.history = []                   # (rv, resource, type, obj)
        self.compacted = 0                  # watches from an rv below this get 410
        self.requests = []                  # (method, path, status)
        self.watch_generation = 0           # bump to drop every open watch
        self.error_generation = 0           # bump to send an ERROR 410 into open watches
        self.expire_watches = 0             # the next N watches get 410 whatever their rv
        self.race_next_pv_create = False    # the next PV POST finds the PV made meanwhile: 409
        self.stall_pv_create = False        # PV POSTs hang until released
        self.expire_next_continue = False   # the next continue token is too old (410)
        self.conflict_next_put = False      # the next update (or patch with a precondition) is a 409
        self.split_events = False           # watch events cut into 7-byte chunks
        self.coalesce_events = False        # pending watch events sent as one chunk
        self.throttles = []                 # [method, path prefix, n left, Retry-After or None]
        self.timed = []                     # (time, method, path, status) of every answer
        self.bookmarks = 0                  # BOOKMARK events sent
        self.stalled = threading.Event()    # set when a PV POST is hanging
        self.release = threading.Event()
        self.token = None
        self.patches = []                   # (resource, name, subresource, patch) of every PATCH
        self.cm_paused = False              # the controller-manager has not seen new claims yet
        self.bad_list_rv = None             # a resource whose lists carry a malformed resourceVersion
        self.raw_get = {}                   # GET path -> body: HTTP 200 with that text (not an object)
        self.lose_claims = False            # a bound PV deleted: its claim is Lost (the binder's)

    # --- state changes (under the lock) -------------------------------------------------
    def _record(self, res, typ, obj):
        self.history.append((int(obj["metadata"]["resourceVersion"]), res, typ, json.loads(json.dumps(obj))))
        self.lock.notify_all()

    def _next_rv(self):
        self.rv += 1
        return str(self.rv)

    def put(self, res, obj, typ=None):
        with self.lock:
            m = obj.setdefault("metadata", {})
            key = (m.get("namespace", ""), m["name"])
            existed = key in self.objs[res]
            m.setdefault("uid", str(uuid.uuid4()))
            m.setdefault("creationTimestamp", now())
            m["resourceVersion"] = self._next_rv()
            self.objs[res][key] = obj
            self._record(res, typ or ("MODIFIED" if existed else "ADDED"), obj)
            self._controller(res, obj)
            return obj

    def update(self, res, ns, name, obj):
        """An update (PUT or PATCH) as the API applies it: an object marked for deletion that
        has no finalizer left is removed; else stored.  Returns a copy of what was answered."""
        with self.lock:
            m = obj["metadata"]
            if m.get("deletionTimestamp") and not m.get("finalizers"):
                self.objs[res][(ns, name)] = obj
                self.remove(res, ns, name)
                return json.loads(json.dumps(obj))
            return json.loads(json.dumps(self.put(res, obj)))

    def remove(self, res, ns, name):
        with self.lock:
            obj = self.objs[res].pop((ns, name), None)
            if obj is None:
                return None
            obj["metadata"]["resourceVersion"] = self._next_rv()
            self._record(res, "DELETED", obj)
            if res == "persistentvolumeclaims":
                # the PV controller: a bound PV of a deleted claim is Released
                for pv in list(self.objs["persistentvolumes"].values()):
                    ref = pv["spec"].get("claimRef") or {}
                    if ref.get("uid") == obj["metadata"]["uid"] and \
                            pv.get("status", {}).get("phase") == "Bound":
                        pv["status"] = {"phase": "Released"}
                        self.put("persistentvolumes", pv)
            if res == "persistentvolumes" and self.lose_claims:
                # the PV binder: a claim whose PV is gone is Lost (it keeps its volumeName)
                for pvc in list(self.objs["persistentvolumeclaims"].values()):
                    if (pvc.get("spec") or {}).get("volumeName") == name and \
                            (pvc.get("status") or {}).get("phase") == "Bound":
                        pvc["status"] = dict(pvc["status"], phase="Lost")
                        pvc["metadata"]["resourceVersion"] = self._next_rv()
                        self._record("persistentvolumeclaims", "MODIFIED", pvc)
            return obj

    def api_delete(self, res, ns, name):
        """DELETE as the API does it: with finalizers, only a deletionTimestamp (MODIFIED)."""
        with self.lock:
            o = self.objs[res].get((ns, name))
            if o is None:
                return None
            if o["metadata"].get("finalizers"):
                if not o["metadata"].get("deletionTimestamp"):
                    o["metadata"]["deletionTimestamp"] = now()
                    o["metadata"]["resourceVersion"] = self._next_rv()
                    self._record(res, "MODIFIED", o)
                return o
            return self.remove(res, ns, name)

    def _controller(self, res, obj):
        """Bind a new PV to the pending claim its claimRef names (uid must match); hand an
        unmatched pending claim to its provisioner."""
        if res == "persistentvolumeclaims":
            return self._claim_controller(obj)
        if res != "persistentvolumes" or obj.get("status", {}).get("phase"):
            return
        ref = obj["spec"].get("claimRef") or {}
        pvc = self.objs["persistentvolumeclaims"].get((ref.get("namespace"), ref.get("name")))
        if pvc is None or pvc["metadata"]["uid"] != ref.get("uid") or \
                pvc.get("spec", {}).get("volumeName") not in (None, "", obj["metadata"]["name"]):
            obj["status"] = {"phase": "Available"}
            return
        obj["status"] = {"phase": "Bound"}
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._record(res, "MODIFIED", obj)
        pvc["spec"]["volumeName"] = obj["metadata"]["name"]
        # the binder copies the PV's capacity and access modes into the claim's status
        pvc["status"] = {"phase": "Bound", "capacity": dict(obj["spec"].get("capacity") or {}),
                         "accessModes": list(obj["spec"].get("accessModes") or [])}
        pvc["metadata"]["resourceVersion"] = self._next_rv()
        self._record("persistentvolumeclaims", "MODIFIED", pvc)

    @staticmethod
    def _bytes(q):
        units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50,
                 "Ei": 1 << 60, "": 1}
        for u in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"):
            if q.endswith(u):
                return int(q[:-2]) * units[u]
        return int(q)

    def _claim_controller(self, pvc):
        """The controller-manager's syncUnboundClaim, the parts a provisioner sees."""
        m, spec = pvc["metadata"], pvc.get("spec", {})
        ann = m.setdefault("annotations", {})
        if self.cm_paused or m.get("deletionTimestamp") or spec.get("volumeName") or \
                pvc.get("status", {}).get("phase", "Pending") != "Pending" or \
                "volume.kubernetes.io/storage-provisioner" in ann or \
                "volume.beta.kubernetes.io/storage-provisioner" in ann:
            return
        cls = spec.get("storageClassName") or ann.get("volume.beta.kubernetes.io/storage-class")
        sc = self.objs["storageclasses"].get(("", cls)) if cls else None
        want = self._bytes(spec.get("resources", {}).get("requests", {}).get("storage", "0"))
        if not spec.get("selector"):
            for pv in sorted(self.objs["persistentvolumes"].values(),
                             key=lambda o: self._bytes(((o.get("spec") or {}).get("capacity") or {})
                                                       .get("storage", "0"))):
                ps = pv.get("spec") or {}
                if pv.get("status", {}).get("phase") != "Available" or ps.get("claimRef") or \
                        pv["metadata"].get("deletionTimestamp") or \
                        (ps.get("storageClassName") or "") != (cls or "") or \
                        self._bytes((ps.get("capacity") or {}).get("storage", "0")) < want or \
                        not set(spec.get("accessModes", [])) <= set(ps.get("accessModes", [])):
                    continue
                ps["claimRef"] = {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                                  "namespace": m["namespace"], "name": m["name"], "uid": m["uid"],
                                  "resourceVersion": m["resourceVersion"]}
                pv["status"] = {"phase": "Bound"}
                pv["metadata"]["resourceVersion"] = self._next_rv()
                self._record("persistentvolumes", "MODIFIED", pv)
                spec["volumeName"] = pv["metadata"]["name"]
                pvc["status"] = {"phase": "Bound"}
                m["resourceVersion"] = self._next_rv()
                self._record("persistentvolumeclaims", "MODIFIED", pvc)
                return
        if sc is None:
            return
        if sc.get("volumeBindingMode") == "WaitForFirstConsumer" and \
                not ann.get("volume.kubernetes.io/selected-node"):
            return
        ann["volume.kubernetes.io/storage-provisioner"] = sc["provisioner"]
        ann["volume.beta.kubernetes.io/storage-provisioner"] = sc["provisioner"]
        m["resourceVersion"] = self._next_rv()
        self._record("persistentvolumeclaims", "MODIFIED", pvc)

    def cm_resume(self):
        with self.lock:
            self.cm_paused = False
            for pvc in list(self.objs["persistentvolumeclaims"].values()):
                self._claim_controller(pvc)

    # --- test helpers ---------------------------------------------------------------------
    def get(self, res, name, ns=""):
        with self.lock:
            o = self.objs[res].get((ns, name))
            return json.loads(json.dumps(o)) if o else None

    def items(self, res):
        with self.lock:
            return [json.loads(json.dumps(o)) for o in self.objs[res].values()]

    def count(self, method, prefix, code=None):
        with self.lock:
            return sum(1 for m, p, c in self.requests
                       if m == method and p.startswith(prefix) and (code is None or c == code))

    def compact(self):
        """Forget history: every resourceVersion older than the current one is too old."""
        with self.lock:
            self.compacted = self.rv
            self.history = [h for h in self.history if h[0] > self.rv]

    def throttle(self, method, prefix, n=1, retry_after=1):
        """The next @n @method requests below @prefix get 429 Too Many Requests (with
        Retry-After: @retry_after seconds, or none), as API priority and fairness answers."""
        with self.lock:
            self.throttles.append([method, prefix, n, retry_after])

    def times(self, method, prefix, code=None):
        with self.lock:
            return [t for t, m, p, c in self.timed
                    if m == method and p.startswith(prefix) and (code is None or c == code)]

    def expire_next_watches(self, n=2):
        with self.lock:
            self.expire_watches += n

    def inject_watch_error(self):
        with self.lock:
            self.error_generation += 1
            self.lock.notify_all()

    def drop_watches(self):
        with self.lock:
            self.watch_generation += 1
            self.lock.notify_all()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-kube-apiserver"
    # headers and body are two writes: without TCP_NODELAY every response
    # waits for the client's delayed ACK (40 ms)
    disable_nagle_algorithm = True

    def log_message(self, fmt, *args):
        pass

    @property
    def store(self):
        return self.server.store

    def send_json(self, code, obj, headers=None):
        body = (json.dumps(obj) + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)
        with self.store.lock:
            self.store.requests.append((self.command, self.path, code))
            self.store.timed.append((time.time(), self.command, self.path, code))

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n)) if n else None

    def route(self):
        """-> (resource, namespace, name, query) or None"""
        u = urlsplit(self.path)
        q = {k: v[-1] for k, v in parse_qs(u.query).items()}
        parts = [p for p in u.path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            rest = parts[2:]
        elif parts[:3] in (["apis", "storage.k8s.io", "v1"], ["apis", "coordination.k8s.io", "v1"]):
            rest = parts[3:]
        else:
            return None
        ns = ""
        if rest[:1] == ["namespaces"] and len(rest) >= 3:
            ns, rest = rest[1], rest[2:]
        if not rest or rest[0] not in KINDS:
            return None
        if len(rest) > 2 and rest[2] != "status":
            return None
        q["_subresource"] = rest[2] if len(rest) > 2 else ""
        return rest[0], ns, (rest[1] if len(rest) > 1 else None), q

    def throttled(self):
        st = self.store
        with st.lock:
            for t in st.throttles:
                if t[2] > 0 and t[0] == self.command and self.path.startswith(t[1]):
                    t[2] -= 1
                    break
            else:
                return False
        self.send_json(429, status(429, "TooManyRequests", "Too many requests, please try again later."),
                       {"Retry-After": str(t[3])} if t[3] is not None else None)
        return True

    def authorized(self):
        """False (answered 429 or 401, the request body read and dropped) or True."""
        n = int(self.headers.get("Content-Length") or 0)
        if self.throttled():
            self.rfile.read(n)
            return False
        if self.store.token is None:
            return True
        if self.headers.get("Authorization") == "Bearer " + self.store.token:
            return True
        self.rfile.read(n)
        self.send_json(401, status(401, "Unauthorized", "Unauthorized"))
        return False

    def do_GET(self):
        if not self.authorized():
            return
        raw = self.store.raw_get.get(urlsplit(self.path).path)
        if raw is not None:
            body = raw.encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            with self.store.lock:
                self.store.requests.append((self.command, self.path, 200))
            return
        r = self.route()
        if not r:
            return self.send_json(404, status(404, "NotFound", "the server could not find the requested resource"))
        res, ns, name, q = r
        if name:
            o = self.store.get(res, name, ns)
            if o is None:
                return self.send_json(404, status(404, "NotFound", '%s "%s" not found' % (res, name),
                                                  {"name": name, "kind": res}))
            return self.send_json(200, o)
        if q.get("watch") in ("1", "true"):
            return self.watch(res, ns, q)
        return self.list(res, ns, q)

    def list(self, res, ns, q):
        st = self.store
        with st.lock:
            sel = [kv.split("=", 1) for kv in (q.get("labelSelector") or "").split(",") if kv]
            items = sorted((o for (n, _), o in st.objs[res].items() if (not ns or n == ns) and
                            all((o["metadata"].get("labels") or {}).get(k) == v for k, v in sel)),
                           key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
            rv = st.rv
            start = 0
            if q.get("continue"):
                try:
                    tok = json.loads(base64.urlsafe_b64decode(q["continue"]))
                    start, trv = tok["start"], tok["rv"]
                except Exception:
                    return self.send_json(400, status(400, "BadRequest", "invalid continue token"))
                if trv < st.compacted or st.expire_next_continue:
                    st.expire_next_continue = False
                    return self.send_json(410, status(
                        410, "Expired", "The provided continue parameter is too old to display a "
                        "consistent list result. You can start a new list without the continue "
                        "parameter, or use the continue token in this response to retrieve the "
                        "remainder of the results."))
                rv = trv
            limit = int(q.get("limit") or 0) or len(items) + 1
            page = items[start:start + limit]
            meta = {"resourceVersion": str(rv) if st.bad_list_rv != res else "%d x&y" % rv}
            if start + limit < len(items):
                meta["continue"] = base64.urlsafe_b64encode(
                    json.dumps({"start": start + limit, "rv": rv}).encode()).decode()
        kind = KINDS[res][0]
        self.send_json(200, {"kind": kind + "List", "apiVersion": "v1", "metadata": meta,
                             "items": page})

    def chunk(self, obj):
        data = (json.dumps(obj) + "\n").encode()
        if self.store.split_events:
            # one event over many HTTP chunks and TCP writes, cut anywhere (inside strings too)
            for i in range(0, len(data), 7):
                piece = data[i:i + 7]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
                time.sleep(0.001)
            return
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def chunks(self, events):
        if self.store.coalesce_events and len(events) > 1:
            # several events in one chunk (and one write), as a busy server flushes them
            data = b"".join((json.dumps(e) + "\n").encode() for e in events)
            # in TCP writes of random sizes: the client reads the chunk in pieces that end
            # anywhere (the end of one event, whole ones and the start of the next in one read)
            self.wfile.write(b"%x\r\n" % len(data))
            i = 0
            while i < len(data):
                n = random.randint(1, 3000)
                self.wfile.write(data[i:i + n])
                self.wfile.flush()
                time.sleep(0.002)
                i += n
            self.wfile.write(b"\r\n")
            self.wfile.flush()
            return
        for e in events:
            self.chunk(e)

    def watch(self, res, ns, q):
        st = self.store
        rv = int(q.get("resourceVersion") or 0)
        deadline = time.time() + int(q.get("timeoutSeconds") or 1800)
        bookmarks = q.get("allowWatchBookmarks") == "true"
        with st.lock:
            st.requests.append(("WATCH", self.path, 200))
            gen, errgen = st.watch_generation, st.error_generation
            expired = rv < st.compacted or st.expire_watches > 0
            if st.expire_watches > 0 and rv >= st.compacted:
                st.expire_watches -= 1
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            if expired:
                self.chunk({"type": "ERROR", "object": status(
                    410, "Expired", "too old resource version: %d (%d)" % (rv, st.compacted))})
                self.wfile.write(b"0\r\n\r\n")
                return
            sent = rv
            while True:
                with st.lock:
                    while True:
                        if st.watch_generation != gen:
                            # a dropped connection: no terminating chunk
                            self.close_connection = True
                            self.connection.shutdown(2)
                            return
                        if st.error_generation != errgen:
                            ev = [{"type": "ERROR", "object": status(
                                410, "Expired", "too old resource version: %d (%d)" % (sent, st.rv))}]
                            break
                        ev = [{"type": t, "object": o} for (r, rs, t, o) in st.history
                              if rs == res and r > sent and
                              (not ns or o["metadata"].get("namespace") == ns)]
                        if ev or time.time() >= deadline:
                            break
                        st.lock.wait(0.2)
                    if ev and ev[0]["type"] != "ERROR":
                        sent = max(int(e["object"]["metadata"]["resourceVersion"]) for e in ev)
                self.chunks(ev)
                if bookmarks and not ev and time.time() >= deadline:
                    # as kube-apiserver does for allowWatchBookmarks: the current
                    # resourceVersion just before the watch times out, so the client
                    # resumes from there even when nothing it watches has changed
                    with st.lock:
                        sent = max(sent, st.rv)
                    self.chunk({"type": "BOOKMARK", "object": {
                        "kind": KINDS[res][0], "apiVersion": "v1",
                        "metadata": {"resourceVersion": str(sent),
                                     "annotations": {"k8s.io/initial-events-end": "false"}}}})
                    with st.lock:
                        st.bookmarks += 1
                if (ev and ev[0]["type"] == "ERROR") or time.time() >= deadline:
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                    return
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True

    def do_POST(self):
        if not self.authorized():
            return
        r = self.route()
        body = self.read_body()
        if not r or r[2] or not isinstance(body, dict):
            return self.send_json(400, status(400, "BadRequest", "bad request"))
        res, ns, _, _ = r
        st = self.store
        name = body.get("metadata", {}).get("name")
        if not name:
            return self.send_json(422, status(422, "Invalid", "metadata.name: Required value"))
        if ns:
            body["metadata"]["namespace"] = ns
        if res == "persistentvolumes":
            with st.lock:
                if st.stall_pv_create:
                    st.requests.append(("POST-STALLED", self.path, 0))
                    st.stalled.set()
            if st.stalled.is_set() and st.stall_pv_create:
                st.release.wait(60)
                # the client is gone (killed): nothing is created, the connection just ends
                self.close_connection = True
                return
            with st.lock:
                if st.race_next_pv_create:
                    # another replica created it between our GET and this POST
                    st.race_next_pv_create = False
                    other = json.loads(json.dumps(body))
                    other["metadata"].setdefault("annotations", {})["test/created-by"] = "other-replica"
                    st.put(res, other)
        with st.lock:
            if (ns, name) in st.objs[res]:
                return self.send_json(409, status(
                    409, "AlreadyExists", '%s "%s" already exists' % (res, name),
                    {"name": name, "kind": res}))
            body.pop("status", None)
            o = st.put(res, body)
            out = json.loads(json.dumps(o))
        self.send_json(201, out)

    def do_PUT(self):
        """Update (claims): optimistic concurrency on metadata.resourceVersion; status and
        deletionTimestamp are the server's; no finalizers left on a deleted object removes it."""
        if not self.authorized():
            return
        r = self.route()
        body = self.read_body()
        if not r or not r[2] or not isinstance(body, dict):
            return self.send_json(400, status(400, "BadRequest", "bad request"))
        res, ns, name, _ = r
        st = self.store
        with st.lock:
            o = st.objs[res].get((ns, name))
            if o is None:
                return self.send_json(404, status(404, "NotFound", '%s "%s" not found' % (res, name)))
            m = body.get("metadata") or {}
            if m.get("resourceVersion") != o["metadata"]["resourceVersion"] or st.conflict_next_put:
                st.conflict_next_put = False
                return self.send_json(409, status(
                    409, "Conflict", 'Operation cannot be fulfilled on %s "%s": the object has been '
                    "modified; please apply your changes to the latest version and try again"
                    % (res, name)))
            for k in ("uid", "creationTimestamp", "deletionTimestamp", "namespace", "name"):
                if k in o["metadata"]:
                    m[k] = o["metadata"][k]
                else:
                    m.pop(k, None)
            body["metadata"] = m
            body["status"] = o.get("status", {})
            out = st.update(res, ns, name, body)
        self.send_json(200, out)

    def do_PATCH(self):
        """A JSON merge patch (RFC 7386), of the object or of its status subresource
        (/status: only "status" changes; otherwise "status" is ignored, as the API does for
        objects with a status subresource).  A metadata.resourceVersion in the patch is a
        precondition (409 when stale)."""
        if not self.authorized():
            return
        r = self.route()
        body = self.read_body()
        if not r or not r[2] or not isinstance(body, dict):
            return self.send_json(400, status(400, "BadRequest", "bad request"))
        if self.headers.get("Content-Type") != "application/merge-patch+json":
            return self.send_json(415, status(415, "UnsupportedMediaType", "unsupported patch type"))
        res, ns, name, q = r
        st = self.store

        def merge(target, patch):
            if not isinstance(patch, dict):
                return patch
            if not isinstance(target, dict):
                target = {}
            for k, v in patch.items():
                if v is None:
                    target.pop(k, None)
                else:
                    target[k] = merge(target.get(k), v)
            return target

        with st.lock:
            o = st.objs[res].get((ns, name))
            if o is None:
                return self.send_json(404, status(404, "NotFound", '%s "%s" not found' % (res, name)))
            rv = (body.get("metadata") or {}).get("resourceVersion")
            if (rv is not None and rv != o["metadata"]["resourceVersion"]) or \
                    (rv is not None and st.conflict_next_put):
                st.conflict_next_put = False
                return self.send_json(409, status(409, "Conflict", "the object has been modified"))
            new = json.loads(json.dumps(o))
            if q["_subresource"] == "status":
                new["status"] = merge(new.get("status") or {}, body.get("status") or {})
            else:
                body.pop("status", None)
                (body.get("metadata") or {}).pop("resourceVersion", None)
                new = merge(new, body)
            st.patches.append((res, name, q["_subresource"], body))
            out = st.update(res, ns, name, new)
        self.send_json(200, out)

    def do_DELETE(self):
        if not self.authorized():
            return
        r = self.route()
        body = self.read_body() or {}
        if not r or not r[2]:
            return self.send_json(405, status(405, "MethodNotAllowed", "no"))
        res, ns, name, _ = r
        st = self.store
        with st.lock:
            o = st.objs[res].get((ns, name))
            if o is None:
                return self.send_json(404, status(404, "NotFound", '%s "%s" not found' % (res, name)))
            pre = (body.get("preconditions") or {}).get("uid")
            if pre and pre != o["metadata"]["uid"]:
                return self.send_json(409, status(
                    409, "Conflict", "Precondition failed: UID in precondition: %s, UID in object "
                    "meta: %s" % (pre, o["metadata"]["uid"])))
            if o["metadata"].get("finalizers"):
                # the API: only a deletionTimestamp; the object stays until its finalizers go
                out = json.loads(json.dumps(st.api_delete(res, ns, name)))
                return self.send_json(200, out)
            st.remove(res, ns, name)
        self.send_json(200, status(200, "", "") | {"status": "Success"})


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # a client killed on purpose (kill -9 tests) resets its connections
        if not isinstance(sys.exc_info()[1], (ConnectionError, BrokenPipeError, ssl.SSLError)):
            super().handle_error(request, client_address)


class FakeAPI:
    def __init__(self, certfile=None, keyfile=None, token=None):
        self.store = Store()
        self.store.token = token
        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.store = self.store
        scheme = "http"
        if certfile:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(certfile, keyfile)
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
            scheme = "https"
        self.url = "%s://127.0.0.1:%d" % (scheme, self.httpd.server_address[1])
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.store.release.set()
        self.store.drop_watches()
        self.httpd.shutdown()
        self.httpd.server_close()
