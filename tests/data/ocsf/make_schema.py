"""Turn a compiled OCSF schema (``python -m ocsf.compile``, from the ocsf-lib package) into the JSON
Schema of one event class, every object it reaches under ``$defs``.

    python tests/data/ocsf/make_schema.py compiled.json api_activity OCSF_SCHEMA_REPO > api_activity.schema.json

Each attribute's type becomes its JSON type (``timestamp_t`` an integer, ``json_t`` anything),
with the regex, range and length of its OCSF type; an enum attribute takes its listed values
only; ``required`` attributes are required (one a profile requires, only in an event whose
``metadata.profiles`` names that profile), an object's ``at_least_one`` and ``just_one``
constraints hold (as the object's own definition in the repository states them: the compiler
keeps a base object's), and no attribute the class or object does not define is allowed (what
is not mapped goes under ``unmapped``, of OCSF's generic ``object`` type, which takes any). Every
profile's attributes are allowed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

_JSON_TYPES = {
    "string_t": "string",
    "integer_t": "integer",
    "long_t": "integer",
    "float_t": "number",
    "boolean_t": "boolean",
}


def _type_schema(types: dict[str, Any], name: str) -> dict[str, Any]:
    if name == "json_t":
        return {}
    spec = types.get(name, {})
    base = name if name in _JSON_TYPES else spec.get("type")
    while base is not None and base not in _JSON_TYPES:
        base = types[base].get("type")
    schema: dict[str, Any] = {"type": _JSON_TYPES[base or name]}
    if spec.get("regex"):
        schema["pattern"] = spec["regex"]
    if spec.get("max_len"):
        schema["maxLength"] = spec["max_len"]
    if spec.get("range"):
        schema["minimum"], schema["maximum"] = spec["range"]
    return schema


def _attribute(compiled: dict[str, Any], attribute: dict[str, Any], wanted: set[str]) -> dict[str, Any]:
    kind = attribute["type"]
    if kind in compiled["objects"]:
        wanted.add(kind)
        item: dict[str, Any] = {"$ref": f"#/$defs/{kind}"}
    else:
        item = _type_schema(compiled["types"], kind)
        if attribute.get("enum"):
            keys = list(attribute["enum"])
            item["enum"] = [int(key) for key in keys] if item.get("type") == "integer" else keys
    return {"type": "array", "items": item} if attribute.get("is_array") else item


def _by_profile(compiled: dict[str, Any], name: str, spec: dict[str, Any]) -> str | None:
    """The profile that makes attribute ``name`` required, if a profile does."""
    profile = spec.get("profile")
    given = compiled["profiles"].get(profile, {}).get("attributes", {}).get(name, {}) if profile else {}
    return profile if given.get("requirement") == "required" else None


def _record(
    compiled: dict[str, Any], record: dict[str, Any], wanted: set[str], constraints: dict[str, Any]
) -> dict[str, Any]:
    attributes = record["attributes"]
    required = {name: spec for name, spec in attributes.items() if spec.get("requirement") == "required"}
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {name: _attribute(compiled, spec, wanted) for name, spec in sorted(attributes.items())},
        "required": sorted(name for name, spec in required.items() if _by_profile(compiled, name, spec) is None),
        "additionalProperties": False,
    }
    conditions = []
    for name, spec in sorted(required.items()):
        if (profile := _by_profile(compiled, name, spec)) is not None:
            names_profile = {"properties": {"profiles": {"contains": {"const": profile}}}, "required": ["profiles"]}
            conditions.append(
                {
                    "if": {"properties": {"metadata": names_profile}, "required": ["metadata"]},
                    "then": {"required": [name]},
                }
            )
    if conditions:
        schema["allOf"] = conditions
    if constraints.get("at_least_one"):
        schema["anyOf"] = [{"required": [name]} for name in constraints["at_least_one"]]
    if constraints.get("just_one"):
        schema["oneOf"] = [{"required": [name]} for name in constraints["just_one"]]
    return schema


def _own_constraints(repo: Path) -> dict[str, dict[str, Any]]:
    """Each object's constraints as its repository file, or the nearest it extends, states them."""
    sources = {}
    for path in (repo / "objects").glob("*.json"):
        source = json.loads(path.read_text(encoding="utf-8"))
        sources[source["name"]] = source
    found: dict[str, dict[str, Any]] = {}
    for name in sources:
        current: str | None = name
        while current in sources and "constraints" not in sources[current]:
            current = sources[current].get("extends")
        found[name] = sources[current]["constraints"] if current in sources else {}
    return found


def class_schema(compiled: dict[str, Any], name: str, repo: Path) -> dict[str, Any]:
    """The JSON Schema of class ``name`` of ``compiled`` (compiled from ``repo``)."""
    event = compiled["classes"][name]
    constraints = _own_constraints(repo)
    wanted: set[str] = set()
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"OCSF {compiled['version']} {event['caption']} ({event['uid']})",
        **_record(compiled, event, wanted, event.get("constraints") or {}),
    }
    defs: dict[str, Any] = {}
    while pending := sorted(wanted - defs.keys()):
        for object_name in pending:
            if object_name == "object":  # OCSF's generic object (unmapped, data ...): any attributes
                defs[object_name] = {"type": "object"}
                continue
            defs[object_name] = _record(
                compiled, compiled["objects"][object_name], wanted, constraints.get(object_name, {})
            )
    schema["$defs"] = dict(sorted(defs.items()))
    return schema


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as file:
        compiled = json.load(file)
    json.dump(class_schema(compiled, sys.argv[2], Path(sys.argv[3])), sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")
