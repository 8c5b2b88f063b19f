"""Triton's config.pbtxt through the one text-format writer: any tensor name reads back as itself with protobuf's own
parser (no quote, newline or brace in it can add a field such as an ``instance_group``), escaped as protobuf's writer
escapes it; field names and enum values that are not identifiers are refused."""

from __future__ import annotations

import pytest

pytest.importorskip("google.protobuf")
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_encoding, text_format

from kftrain.steps.export.pbtxt import Enum, PbtxtError, quoted, render
from kftrain.steps.export.serving import Tensor, triton_config


def model_config_class() -> type:
    """The fields of Triton's ModelConfig this test reads (triton-inference-server/common model_config.proto),
    instance_group included, so that an injected block would parse and be seen."""
    f = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="kftrain_test_model_config.proto", package="kftrain_test")
    data_type = proto.enum_type.add(name="DataType")
    for number, name in enumerate(["TYPE_INVALID", "TYPE_FP32", "TYPE_FP64", "TYPE_FP16", "TYPE_INT64", "TYPE_INT32"]):
        data_type.value.add(name=name, number=number)
    reshape = proto.message_type.add(name="Reshape")
    reshape.field.add(name="shape", number=1, type=f.TYPE_INT64, label=f.LABEL_REPEATED)
    tensor = proto.message_type.add(name="Tensor")
    tensor.field.add(name="name", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    tensor.field.add(
        name="data_type", number=2, type=f.TYPE_ENUM, label=f.LABEL_OPTIONAL, type_name=".kftrain_test.DataType"
    )
    tensor.field.add(name="dims", number=3, type=f.TYPE_INT64, label=f.LABEL_REPEATED)
    tensor.field.add(
        name="reshape", number=4, type=f.TYPE_MESSAGE, label=f.LABEL_OPTIONAL, type_name=".kftrain_test.Reshape"
    )
    group = proto.message_type.add(name="InstanceGroup")
    group.field.add(name="kind", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    group.field.add(name="count", number=2, type=f.TYPE_INT32, label=f.LABEL_OPTIONAL)
    config = proto.message_type.add(name="ModelConfig")
    config.field.add(name="name", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    config.field.add(name="platform", number=2, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    config.field.add(name="max_batch_size", number=3, type=f.TYPE_INT32, label=f.LABEL_OPTIONAL)
    for number, name in ((4, "input"), (5, "output")):
        config.field.add(
            name=name, number=number, type=f.TYPE_MESSAGE, label=f.LABEL_REPEATED, type_name=".kftrain_test.Tensor"
        )
    config.field.add(
        name="instance_group",
        number=6,
        type=f.TYPE_MESSAGE,
        label=f.LABEL_REPEATED,
        type_name=".kftrain_test.InstanceGroup",
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("kftrain_test.ModelConfig"))


ModelConfig = model_config_class()

NAMES = {
    "plain": "output__0",
    "a quote, newlines and an instance_group block": 'out"\n}\ninstance_group [ { kind: "KIND_GPU" count: 8 } ]\n#',
    "a name that closes the list and opens an instance_group": (
        'out" }\n]\ninstance_group [ { kind: "KIND_GPU" count: 8 } ]\noutput [ { name: "x'
    ),
    "a backslash before the quote": 'out\\"\ninstance_group [ { count: 1 } ]',
    "a single quote": "it's",
    "a carriage return and a tab": "a\r\tb",
    "control characters and DEL": "a\x00\x01\x1f\x7fb",
    "non-ASCII": "température_λ_🙂",
    "braces and a comment": "} # {",
    "an octal-looking tail": "\x01" + "23",
}


@pytest.mark.parametrize("case", NAMES)
def test_any_tensor_name_reads_back_as_itself_and_adds_no_field(case) -> None:
    name = NAMES[case]
    config = triton_config(
        "model", "onnxruntime_onnx", [Tensor("input", "float32", (3,))], [Tensor(name, "float32", ())]
    )
    parsed = text_format.Parse(config, ModelConfig())
    assert [o.name for o in parsed.output] == [name]
    assert not parsed.instance_group, config
    assert (parsed.name, parsed.platform, parsed.max_batch_size) == ("model", "onnxruntime_onnx", 256)
    assert list(parsed.output[0].dims) == [1] and parsed.output[0].HasField("reshape")
    assert quoted(name) == '"' + text_encoding.CEscape(name, as_utf8=False) + '"'  # as protobuf's writer escapes
    assert config.isascii() and config.count("\n") == 9  # a line for each field, bracket and tensor


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ({"name x": "m"}, "field name 'name x' is not an identifier"),
        ({"input": [{"data_type": Enum("TYPE_FP32 }")}]}, "enum value 'TYPE_FP32 }' is not an identifier"),
        ({"name": 1.5}, "1.5 \\(float\\) is not a value this writer takes"),
    ],
)
def test_what_text_format_cannot_hold_is_refused(message, error) -> None:
    with pytest.raises(PbtxtError, match=error):
        render(message)
