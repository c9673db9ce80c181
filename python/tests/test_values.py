"""The plain-data parts: no library needed."""

import ferry
from ferry import errors


def test_block_layout_span():
    assert ferry.BlockLayout(block_size=16, blocks=4).span() == 64
    # 2 layers of 4 blocks of 16 bytes, blocks 32 apart, layers 256 apart:
    # the last block starts at 256 + 3*32.
    assert ferry.BlockLayout(16, 4, stride=32, layers=2, layer_stride=256).span() == 256 + 96 + 16


def test_error_classes_carry_code_and_message():
    classes = {-1: errors.InvalidRequest, -8: errors.DeadlineExceeded}
    e = errors.error_for(-1, "register: empty buffer", classes)
    assert isinstance(e, ferry.InvalidRequest) and isinstance(e, ValueError)
    assert e.code == -1 and str(e) == "register: empty buffer"
    assert isinstance(errors.error_for(-8, "x", classes), TimeoutError)
    unknown = errors.error_for(-50, "what", classes)
    assert type(unknown) is ferry.FerryError and "-50" in str(unknown)


def test_every_abi_name_has_one_class():
    names = errors.by_abi_name()
    assert len(names) == len(set(names.values()))
    for n in ("FERRY_ERR_INVALID", "FERRY_ERR_NOT_REGISTERED", "FERRY_ERR_DEADLINE_EXCEEDED",
              "FERRY_ERR_CANCELED", "FERRY_ERR_UNAVAILABLE", "FERRY_ERR_BUSY", "FERRY_ERR_CLOSED"):
        assert n in names
