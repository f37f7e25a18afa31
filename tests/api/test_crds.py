"""The CRDs in deploy/ are generated from the models and are what the API server demands."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_binder.api import crds
from gpu_binder.api.crds import KINDS, KindSpec
from gpu_binder.api.kinds import RESOURCES
from gpu_binder.api.types import GPUBindRequest, GPUClass, GPUDevice, GPUUsageRecord

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
BY_KIND = {spec.kind: spec for spec in KINDS}
CRD = {spec.kind: crds.crd(spec) for spec in KINDS}


def version_of(kind: str) -> dict[str, Any]:
    (version,) = CRD[kind]["spec"]["versions"]
    return version  # type: ignore[no-any-return]


def schema_of(kind: str) -> dict[str, Any]:
    return version_of(kind)["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


def node(kind: str, *path: str) -> dict[str, Any]:
    """The schema node at a path of property names ("[]" steps into an array's items)."""
    here = schema_of(kind)
    for step in path:
        here = here["items"] if step == "[]" else here["properties"][step]
    return here


def walk(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path or "<root>", schema
    for name, sub in schema.get("properties", {}).items():
        yield from walk(sub, f"{path}.{name}")
    if "items" in schema:
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}{{}}")


def rules_at(kind: str, *path: str) -> dict[str, str]:
    """rule -> message of the CEL rules on one schema node."""
    return {r["rule"]: r["message"] for r in node(kind, *path).get("x-kubernetes-validations", ())}


# --- The committed files ----------------------------------------------------------------


@pytest.mark.parametrize("spec", KINDS, ids=lambda s: s.kind)
def test_committed_crd_is_what_the_generator_writes(spec: KindSpec) -> None:
    path = DEPLOY / "crds" / crds.crd_file_name(spec)
    assert path.exists(), f"{path} is missing: run `make crds`"
    assert path.read_text() == crds.render_crd(spec), f"{path} is stale: run `make crds`"


def test_committed_kubevirt_crds_are_what_the_generator_writes() -> None:
    path = DEPLOY / "kubevirt" / "crds.yaml"
    assert path.read_text() == crds.render_kubevirt_crds(), f"{path} is stale: run `make crds`"


def test_deploy_crds_holds_only_generated_files() -> None:
    expected = {crds.crd_file_name(spec) for spec in KINDS}
    assert {p.name for p in (DEPLOY / "crds").iterdir()} == expected


def test_the_files_parse_back_to_the_generated_objects() -> None:
    for spec in KINDS:
        assert yaml.safe_load(crds.render_crd(spec)) == crds.crd(spec)
    assert list(yaml.safe_load_all(crds.render_kubevirt_crds())) == crds.kubevirt_crds()


def test_generation_is_deterministic() -> None:
    assert [crds.render_crd(s) for s in KINDS] == [crds.render_crd(s) for s in KINDS]


def test_write_crds_writes_one_file_per_kind_and_the_kubevirt_stand_ins(tmp_path: Path) -> None:
    assert crds.main([str(tmp_path / "crds")]) == 0
    written = sorted(p.name for p in (tmp_path / "crds").iterdir())
    assert written == [
        "gpu.cozystack.io_gpubindrequests.yaml",
        "gpu.cozystack.io_gpuclasses.yaml",
        "gpu.cozystack.io_gpudevices.yaml",
        "gpu.cozystack.io_gpuusagerecords.yaml",
    ]
    assert (tmp_path / "kubevirt" / "crds.yaml").read_text() == crds.render_kubevirt_crds()


# --- Names, scope, subresources ---------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "plural", "short", "scope"),
    [
        ("GPUClass", "gpuclasses", "gpuc", "Cluster"),
        ("GPUDevice", "gpudevices", "gpud", "Cluster"),
        ("GPUBindRequest", "gpubindrequests", "gpubr", "Namespaced"),
        ("GPUUsageRecord", "gpuusagerecords", "gpuur", "Namespaced"),
    ],
)
def test_names_and_scope(kind: str, plural: str, short: str, scope: str) -> None:
    spec = CRD[kind]["spec"]
    assert CRD[kind]["metadata"]["name"] == f"{plural}.gpu.cozystack.io"
    assert spec["group"] == "gpu.cozystack.io"
    assert spec["scope"] == scope
    assert spec["names"]["plural"] == plural
    assert spec["names"]["shortNames"] == [short]
    assert spec["names"]["categories"] == ["gpu"]
    assert version_of(kind)["name"] == "v1alpha1"
    assert version_of(kind)["served"] and version_of(kind)["storage"]


@pytest.mark.parametrize("model", [GPUClass, GPUDevice, GPUBindRequest, GPUUsageRecord])
def test_crd_agrees_with_the_client_registry(model: type[Any]) -> None:
    resource = RESOURCES[model]
    crd = CRD[resource.kind]
    assert crd["spec"]["names"]["plural"] == resource.plural
    assert (crd["spec"]["scope"] == "Namespaced") == resource.namespaced
    assert ("subresources" in version_of(resource.kind)) == resource.status_subresource


@pytest.mark.parametrize("kind", ["GPUClass", "GPUDevice", "GPUBindRequest"])
def test_status_is_a_subresource_so_only_the_binder_writes_it(kind: str) -> None:
    assert version_of(kind)["subresources"] == {"status": {}}
    assert "status" in schema_of(kind)["properties"]


def test_usage_records_are_spec_only() -> None:
    assert "subresources" not in version_of("GPUUsageRecord")
    assert "status" not in schema_of("GPUUsageRecord")["properties"]


# --- Printer columns --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "columns"),
    [
        (
            "GPUDevice",
            {
                "Node": ".spec.nodeName",
                "Class": ".status.className",
                "Phase": ".status.phase",
                "VM": ".status.vm",
                "Health": ".spec.health",
                "Age": ".metadata.creationTimestamp",
            },
        ),
        (
            "GPUClass",
            {
                "Resource": ".spec.resourceName",
                "Devices": ".status.devices",
                "Available": ".status.available",
                "Bound": ".status.bound",
                "Attached": ".status.attached",
                "Lost": ".status.lost",
                "Cleaning": ".status.cleaning",
                "Largest Free Set": ".status.largestFreeSet",
                "Age": ".metadata.creationTimestamp",
            },
        ),
        (
            "GPUBindRequest",
            {
                "VM": ".spec.vm.name",
                "Phase": ".status.phase",
                "Node": ".status.nodeName",
                "Message": ".status.message",
            },
        ),
        (
            "GPUUsageRecord",
            {
                "VM": ".spec.vm",
                "Device": ".spec.device",
                "Class": ".spec.className",
                "Node": ".spec.nodeName",
                "Start": ".spec.start",
                "End": ".spec.end",
            },
        ),
    ],
)
def test_kubectl_get_shows_the_columns_users_ask_for(kind: str, columns: dict[str, str]) -> None:
    shown = {
        c["name"]: c["jsonPath"]
        for c in version_of(kind)["additionalPrinterColumns"]
        if c.get("priority", 0) == 0
    }
    assert {name: shown.get(name) for name in columns} == columns


@pytest.mark.parametrize("kind", list(BY_KIND))
def test_every_printer_column_points_at_a_field_of_the_schema(kind: str) -> None:
    for column in version_of(kind)["additionalPrinterColumns"]:
        first, *rest = column["jsonPath"].lstrip(".").split(".")
        if first == "metadata":
            continue
        here = node(kind, first)
        for step in rest:
            name, indexed, _ = step.partition("[")  # requests[0]: an array's first item
            assert name in here.get("properties", {}), f"{column['jsonPath']} is not in the schema"
            here = here["properties"][name]
            if indexed:
                here = here["items"]
        assert column["type"] in {"string", "integer", "date", "number", "boolean"}


# --- Structural schemas -----------------------------------------------------------------


ALL_SCHEMAS = [
    *((spec.kind, schema_of(spec.kind)) for spec in KINDS),
    *(
        (c["spec"]["names"]["kind"], c["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
        for c in crds.kubevirt_crds()
    ),
]


@pytest.mark.parametrize(("kind", "schema"), ALL_SCHEMAS, ids=[k for k, _ in ALL_SCHEMAS])
def test_every_schema_is_structural(kind: str, schema: dict[str, Any]) -> None:
    for path, here in walk(schema):
        assert "type" in here or here.get("x-kubernetes-preserve-unknown-fields"), (
            f"{kind}{path} has no type"
        )
        for keyword in ("$ref", "$defs", "anyOf", "oneOf", "allOf", "not", "title"):
            assert keyword not in here, f"{kind}{path} has {keyword}"
        assert not ("properties" in here and "additionalProperties" in here), path
        assert here.get("uniqueItems") is not True, f"{kind}{path}: the API server forbids it"


@pytest.mark.parametrize("kind", list(BY_KIND))
def test_the_root_is_an_object_whose_metadata_belongs_to_the_api_server(kind: str) -> None:
    root = schema_of(kind)
    assert root["type"] == "object"
    assert root["properties"]["metadata"] == {"type": "object"}
    assert root["properties"]["apiVersion"]["type"] == "string"
    assert root["properties"]["kind"]["type"] == "string"
    assert root["required"] == ["spec"]


def test_optional_fields_are_nullable_and_times_are_date_time_strings() -> None:
    assert node("GPUDevice", "spec", "slot") == {
        "type": "integer",
        "minimum": 0,
        "maximum": 4095,
        "nullable": True,
    }
    assert node("GPUDevice", "spec", "lastReset") == {
        "type": "string",
        "format": "date-time",
        "nullable": True,
    }
    assert node("GPUDevice", "status", "binding")["nullable"] is True
    assert node("GPUDevice", "status", "binding", "boundAt")["format"] == "date-time"
    assert node("GPUUsageRecord", "spec", "end")["nullable"] is True


def test_the_release_a_reset_cleaned_is_in_the_schema_so_the_server_keeps_it() -> None:
    assert node("GPUDevice", "spec", "lastResetFor") == {
        "type": "string",
        "format": "date-time",
        "nullable": True,
    }


def test_an_optional_enum_is_not_nullable_so_the_server_prunes_a_null_instead_of_refusing_it() -> (
    None
):
    phase = node("GPUDevice", "status", "phase")
    assert phase["enum"] == ["Available", "Bound", "Attached", "Lost", "Cleaning", "Releasing"]
    assert "nullable" not in phase


def test_tuples_are_arrays_and_string_maps_are_additional_properties() -> None:
    requests = node("GPUBindRequest", "spec", "requests")
    assert requests["type"] == "array"
    assert requests["minItems"] == 1
    assert requests["items"]["required"] == ["className", "count"]
    assert node("GPUBindRequest", "status", "devices")["items"] == {
        "type": "string",
        "maxLength": 253,
    }
    assert node("GPUClass", "spec", "match", "nodeSelector")["additionalProperties"] == {
        "type": "string",
        "maxLength": 63,
    }


def test_enums_patterns_bounds_and_defaults_survive() -> None:
    assert node("GPUClass", "spec", "placement", "policy") == {
        "type": "string",
        "enum": ["LeastStranded", "Pack", "Spread"],
        "default": "LeastStranded",
    }
    assert node("GPUClass", "spec", "cleaning")["default"] == "Reset"
    assert node("GPUClass", "spec", "resourceName")["minLength"] == 1
    assert node("GPUClass", "spec", "match", "vendorID")["pattern"] == "^0x[0-9a-f]{4}$"
    assert node("GPUClass", "spec", "match", "deviceIDs", "[]")["pattern"] == "^0x[0-9a-f]{4}$"
    assert node("GPUDevice", "spec", "deviceID")["pattern"] == "^0x[0-9a-f]{4}$"
    assert node("GPUBindRequest", "spec", "requests", "[]", "count")["minimum"] == 1
    assert node("GPUDevice", "spec", "health")["default"] == "Healthy"
    assert node("GPUClass", "spec", "reservation", "releaseAfterStopped")["pattern"]


def test_defaults_carry_no_nulls() -> None:
    for spec in KINDS:
        for path, here in walk(schema_of(spec.kind)):
            assert "null" not in yaml.safe_dump(here.get("default", "")), f"{spec.kind}{path}"


def test_required_fields_follow_the_models() -> None:
    assert node("GPUClass", "spec")["required"] == ["resourceName"]
    assert node("GPUDevice", "spec")["required"] == ["nodeName", "pciAddress", "deviceID"]
    assert node("GPUBindRequest", "spec")["required"] == ["vm", "vmi", "requests"]
    # vmi: of Attached records only, a CEL rule (crdkinds).
    assert node("GPUUsageRecord", "spec")["required"] == ["vm", "device", "start"]


def test_conditions_merge_per_type_under_server_side_apply() -> None:
    for kind in ("GPUClass", "GPUDevice"):
        conditions = node(kind, "status", "conditions")
        assert conditions["x-kubernetes-list-type"] == "map"
        assert conditions["x-kubernetes-list-map-keys"] == ["type"]
        assert "type" in conditions["items"]["required"]


# --- CEL rules --------------------------------------------------------------------------


def test_gpu_device_pci_address_is_checked_with_a_message_a_user_understands() -> None:
    (rule, message), *_ = rules_at("GPUDevice", "spec", "pciAddress").items()
    assert rule.startswith("self.matches(")
    assert "domain:bus:device.function" in message
    assert "0000:3b:00.0" in message


def test_gpu_device_node_name_is_immutable() -> None:
    assert "self == oldSelf" in rules_at("GPUDevice", "spec", "nodeName")


def test_gpu_class_resource_name_is_required() -> None:
    assert "resourceName" in node("GPUClass", "spec")["required"]
    rules = rules_at("GPUClass", "spec")
    assert "has(self.resourceName) && self.resourceName.size() > 0" in rules


def test_gpu_class_device_ids_are_unique() -> None:
    rules = rules_at("GPUClass", "spec", "match", "deviceIDs")
    assert rules == {
        "self.all(id, self.exists_one(other, other == id))": (
            "deviceIDs must not list the same device ID twice"
        )
    }


def test_a_closed_usage_record_is_immutable() -> None:
    rules = rules_at("GPUUsageRecord", "spec")
    assert rules["!has(oldSelf.end) || self == oldSelf"] == "a closed usage record is immutable"


def test_a_usage_record_does_not_end_before_it_starts() -> None:
    rules = rules_at("GPUUsageRecord", "spec")
    assert rules["!has(self.end) || self.end >= self.start"] == "end must not be before start"


def test_bind_request_counts_are_positive() -> None:
    rules = rules_at("GPUBindRequest", "spec", "requests", "[]", "count")
    assert "self > 0" in rules
    assert "at least 1" in rules["self > 0"]


def test_every_rule_has_a_message() -> None:
    for spec in KINDS:
        for path, here in walk(schema_of(spec.kind)):
            for rule in here.get("x-kubernetes-validations", ()):
                assert rule["message"].strip(), f"{spec.kind}{path}: {rule['rule']}"
                assert set(rule) <= {"rule", "message", "fieldPath", "reason"}


def test_the_pci_rule_is_the_schema_pattern() -> None:
    pattern = node("GPUDevice", "spec", "pciAddress")["pattern"]
    (rule,) = rules_at("GPUDevice", "spec", "pciAddress")
    assert rule == "self.matches('" + pattern.replace("\\", "\\\\") + "')"


def unbounded(schema: dict[str, Any]) -> list[str]:
    """Strings and arrays under a node with no maxLength/maxItems (times are fixed size)."""
    found = []
    for path, here in walk(schema):
        fixed_size = here.get("format") == "date-time" or "enum" in here
        if here.get("type") == "string" and "maxLength" not in here and not fixed_size:
            found.append(path)
        if here.get("type") == "array" and "maxItems" not in here:
            found.append(path)
    return found


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("GPUDevice", ("spec", "pciAddress")),
        ("GPUDevice", ("spec", "nodeName")),
        ("GPUClass", ("spec", "match", "deviceIDs")),
        ("GPUUsageRecord", ("spec",)),
        ("GPUBindRequest", ("spec", "requests")),
    ],
)
def test_what_a_cel_rule_scans_is_bounded_so_its_cost_estimate_passes(
    kind: str, path: tuple[str, ...]
) -> None:
    assert unbounded(node(kind, *path)) == []


# --- KubeVirt stand-ins -----------------------------------------------------------------


def test_kubevirt_stand_ins_match_kubevirts_own_declarations() -> None:
    by_kind = {c["spec"]["names"]["kind"]: c for c in crds.kubevirt_crds()}
    # (kind, CRD name, scope, served version), as virt-operator's crds.go declares them.
    declared = [
        ("VirtualMachine", "virtualmachines.kubevirt.io", "Namespaced", "v1"),
        ("VirtualMachineInstance", "virtualmachineinstances.kubevirt.io", "Namespaced", "v1"),
        ("KubeVirt", "kubevirts.kubevirt.io", "Namespaced", "v1"),
        (
            "VirtualMachineInstancetype",
            "virtualmachineinstancetypes.instancetype.kubevirt.io",
            "Namespaced",
            "v1beta1",
        ),
        (
            "VirtualMachineClusterInstancetype",
            "virtualmachineclusterinstancetypes.instancetype.kubevirt.io",
            "Cluster",
            "v1beta1",
        ),
    ]
    assert set(by_kind) == {d[0] for d in declared}
    for kind, name, scope, served in declared:
        crd = by_kind[kind]
        assert crd["metadata"]["name"] == name
        assert crd["spec"]["scope"] == scope
        (version,) = crd["spec"]["versions"]
        assert version["name"] == served
        schema = version["schema"]["openAPIV3Schema"]
        for part in ("spec", "status"):
            assert schema["properties"][part]["x-kubernetes-preserve-unknown-fields"] is True
    # KubeVirt writes VMIs whole (no status subresource); VMs and the KubeVirt CR have one.
    subresources = {k: "subresources" in c["spec"]["versions"][0] for k, c in by_kind.items()}
    assert subresources == {
        "VirtualMachine": True,
        "VirtualMachineInstance": False,
        "KubeVirt": True,
        "VirtualMachineInstancetype": False,
        "VirtualMachineClusterInstancetype": False,
    }


def unbounded_scalars(schema: dict[str, Any]) -> list[str]:
    """Integers without a minimum and a maximum, maps without maxProperties."""
    found = []
    for path, here in walk(schema):
        if here.get("type") == "integer" and not ("minimum" in here and "maximum" in here):
            found.append(path)
        is_map = here.get("type") == "object" and "additionalProperties" in here
        if is_map and "maxProperties" not in here:
            found.append(path)
    return found


@pytest.mark.parametrize("kind", [spec.kind for spec in KINDS])
def test_every_field_of_every_kind_is_bounded(kind: str) -> None:
    # Issue 11: a forged or runaway object cannot carry a 1 MB string, slot 2^62 or a
    # list without end. apiVersion and kind are the API server's to check.
    schema = schema_of(kind)
    found = unbounded(schema) + unbounded_scalars(schema)
    assert [p for p in found if p not in (".apiVersion", ".kind")] == []


def test_a_reservation_too_long_for_a_timedelta_is_read_as_the_longest_allowed() -> None:
    # Stored before the schema bounded it, `99999999999999999999h` raised OverflowError in
    # the binder's orders step.
    from gpu_binder.api.types import RESERVATION_MAX, GPUClassSpec, ReservationSpec

    spec = GPUClassSpec.model_construct(
        resource_name="example.com/gpu",
        reservation=ReservationSpec.model_construct(release_after_stopped="99999999999999999999h"),
    )
    assert spec.release_after == RESERVATION_MAX


def test_a_duration_too_long_for_a_timedelta_is_a_value_error() -> None:
    from gpu_binder.api.meta import parse_duration

    with pytest.raises(ValueError, match="too long"):
        parse_duration("99999999999999999999h")
