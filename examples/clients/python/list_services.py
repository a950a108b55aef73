"""Lists the coordinator's services through gRPC server reflection: no proto files needed.

    python list_services.py --target localhost:7700 --token-file client.token [--ca-file ca.pem]

Needs the grpcio-reflection package. `grpcurl -H "authorization: Bearer $TOKEN" HOST:PORT list`
does the same.
"""

import argparse

import grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--target", default="localhost:7700")
    p.add_argument("--token-file", required=True)
    p.add_argument("--ca-file")
    args = p.parse_args()
    token = open(args.token_file).read().strip()

    # Reflection answers whoever holds the client token; the token rides on every call.
    class Bearer(grpc.UnaryUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
        def _with_token(self, details):
            metadata = list(details.metadata or []) + [("authorization", f"Bearer {token}")]
            return details._replace(metadata=metadata)

        def intercept_unary_unary(self, continuation, details, request):
            return continuation(self._with_token(details), request)

        def intercept_stream_stream(self, continuation, details, requests):
            return continuation(self._with_token(details), requests)

    if args.ca_file:
        creds = grpc.ssl_channel_credentials(open(args.ca_file, "rb").read())
        channel = grpc.secure_channel(args.target, creds)
    else:
        channel = grpc.insecure_channel(args.target)
    channel = grpc.intercept_channel(channel, Bearer())
    for service in ProtoReflectionDescriptorDatabase(channel).get_services():
        print(service)


if __name__ == "__main__":
    main()
