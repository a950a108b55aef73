"""Lists what in Kubernetes objects is deprecated, by the Kubernetes 1.37 schemas that
kubernetes-validate ships: beta and alpha API versions, and any field whose schema
description says it is deprecated. kubernetes-validate itself only warns about API versions it
has no schema for, and says nothing about deprecated fields.

Usage: python deprecated.py K8S_VERSION < objects.json   (prints one finding per line)
"""

import json
import re
import sys

from kubernetes_validate import utils

DEPRECATED = re.compile(r"\bDeprecated:|\bis deprecated\b|\ba deprecated alias\b")


def schema_for(doc, version):
    api_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", doc["apiVersion"])
    schema_dir = "v%s-local-strict" % version
    schema = utils.schema_contents(
        "kubernetes-json-schema/%s/%s-%s.json" % (schema_dir, doc["kind"].lower(), api_version),
        version,
    )
    defs = utils.schema_contents("kubernetes-json-schema/%s/_definitions.json" % schema_dir, version)
    return schema, defs["$defs"]


def resolve(schema, defs):
    while True:
        if "$ref" in schema:
            schema = defs[schema["$ref"].split("/")[-1]]
            continue
        for key in ("allOf", "anyOf", "oneOf"):
            if key in schema:
                subs = [s for s in schema[key] if s.get("type") != "null"]
                if subs:
                    schema = subs[0]
                    break
        else:
            return schema


def walk(value, schema, defs, path, found):
    schema = resolve(schema, defs)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for key, sub in value.items():
            sub_schema = props.get(key)
            if sub_schema is None:
                extra = schema.get("additionalProperties")
                if isinstance(extra, dict):
                    walk(sub, extra, defs, "%s.%s" % (path, key), found)
                continue
            description = sub_schema.get("description", "")
            if DEPRECATED.search(description):
                found.append("%s.%s: %s" % (path, key, description.split(". ")[0]))
            walk(sub, sub_schema, defs, "%s.%s" % (path, key), found)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for i, sub in enumerate(value):
                walk(sub, items, defs, "%s[%d]" % (path, i), found)


def main():
    version = sys.argv[1]
    found = []
    for doc in json.load(sys.stdin):
        name = "%s/%s" % (doc["kind"], doc.get("metadata", {}).get("name", "?"))
        if re.search(r"(alpha|beta)\d*$", doc["apiVersion"]):
            found.append("%s: API version %s is not GA" % (name, doc["apiVersion"]))
            continue
        try:
            schema, defs = schema_for(doc, version)
        except FileNotFoundError:
            found.append("%s: no schema for %s in %s" % (name, doc["apiVersion"], version))
            continue
        walk(doc, schema, defs, name, found)
    for line in found:
        print(line)


main()
