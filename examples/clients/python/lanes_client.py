"""A small Lanes client: submit a campaign, watch it, read its rows and its report.

The gRPC stubs are generated from the repository's proto files (see README.md):

    python -m grpc_tools.protoc -I proto --python_out=OUT --grpc_python_out=OUT \
        proto/lanes/v1/*.proto

and OUT must be on sys.path (or PYTHONPATH) before this module is imported.
"""

import json

import grpc
from lanes.v1 import campaign_pb2 as pb
from lanes.v1 import campaign_pb2_grpc
from lanes.v1 import types_pb2

# A campaign in one of these states runs nothing more until it is resubmitted.
ENDED = (types_pb2.CAMPAIGN_STATE_DONE, types_pb2.CAMPAIGN_STATE_STOPPED)

# Task lists longer than this go through SubmitStream, in chunks of this many tasks.
CHUNK = 1000


class LanesClient:
    """CampaignService with a bearer token, over plaintext or TLS (optionally mutual)."""

    def __init__(self, target, token, ca_file=None, cert_file=None, key_file=None):
        if ca_file is None:
            channel = grpc.insecure_channel(target)
        else:
            def read(path):
                return open(path, "rb").read() if path else None

            creds = grpc.ssl_channel_credentials(
                root_certificates=read(ca_file),
                private_key=read(key_file),
                certificate_chain=read(cert_file),
            )
            channel = grpc.secure_channel(target, creds)
        self._stub = campaign_pb2_grpc.CampaignServiceStub(channel)
        self._metadata = [("authorization", f"Bearer {token}")]

    def submit(self, spec, tasks):
        """Submits `spec` (a dict shaped like docs/campaign.schema.json, or the text of a
        campaign file) and `tasks` (dicts with `id` and optionally `payload`, `group`, `tags`,
        `timeout_s`, `max_turns`, `max_cost_usd`). Returns the SubmitResponse."""
        header = (
            pb.SubmitRequest(campaign_toml=spec)
            if isinstance(spec, str)
            else pb.SubmitRequest(spec_json=json.dumps(spec))
        )
        specs = [task_spec(t) for t in tasks]
        if len(specs) <= CHUNK:
            header.tasks.extend(specs)
            return self._stub.Submit(header, metadata=self._metadata)

        def chunks():
            yield pb.SubmitChunk(header=header)
            for i in range(0, len(specs), CHUNK):
                yield pb.SubmitChunk(tasks=pb.TaskChunk(tasks=specs[i : i + CHUNK]))

        return self._stub.SubmitStream(chunks(), metadata=self._metadata)

    def watch(self, campaign):
        """Yields WatchEvents: a snapshot first, then what happens, until the campaign is done
        or stopped. (The stream itself stays open: an amendment or a resume reopens a
        campaign, and a `campaign_ended` also reports STOPPING.)"""
        request = pb.WatchRequest(id=campaign)
        for event in self._stub.Watch(request, metadata=self._metadata):
            yield event
            kind = event.WhichOneof("event")
            if kind == "snapshot" and event.snapshot.state in ENDED:
                return
            if kind == "campaign_ended" and event.campaign_ended.state in ENDED:
                return

    def rows(self, campaign, follow=False):
        """Yields every row of the ledger as a dict, in seq order."""
        request = pb.RowsRequest(id=campaign, follow=follow)
        for row in self._stub.Rows(request, metadata=self._metadata):
            yield json.loads(row.json)

    def status(self, campaign):
        return self._stub.Get(pb.GetRequest(id=campaign), metadata=self._metadata)

    def report(self, campaign):
        answer = self._stub.Report(pb.ReportRequest(id=campaign), metadata=self._metadata)
        return json.loads(answer.json)


def task_spec(task):
    """A task dict as the wire's TaskSpec; the payload travels as JSON text."""
    return pb.TaskSpec(
        id=task["id"],
        group=task.get("group", ""),
        tags=task.get("tags", []),
        timeout_s=task.get("timeout_s"),
        max_turns=task.get("max_turns"),
        max_cost_usd=task.get("max_cost_usd"),
        payload_json=json.dumps(task.get("payload", {})),
    )


def violations(error):
    """The (field, description) pairs of a refused request (google.rpc.BadRequest in the
    status details), or [] when it carries none. Needs the grpcio-status package."""
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    status = rpc_status.from_call(error)
    found = []
    for detail in status.details if status else []:
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(bad):
            found += [(v.field, v.description) for v in bad.field_violations]
    return found
