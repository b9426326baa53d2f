"""``StrictSerializer.get_fields`` (core/api_fields.py): each serializer
instance gets fields of its own, bound to it, as DRF's deep copy gives, from
a per-class plan of which fields are copied shallowly and which deeply."""

from __future__ import annotations

from api.job_serializers import JobSerializer


def test_each_serializer_binds_copies_of_its_own_and_leaves_the_declared_fields_alone():
    one, other = JobSerializer(), JobSerializer()
    for name in ("name", "interval_seconds", "header_names"):
        assert one.fields[name] is not other.fields[name], name
        assert one.fields[name].parent is one and other.fields[name].parent is other, name
        declared = JobSerializer._declared_fields[name]
        assert declared.parent is None, f"{name}: the class's own field was bound"


def test_a_field_holding_a_field_gets_its_own_copy_of_it():
    """A list's child is bound to its list: a shallow copy would share the
    declared list's child between every serializer."""
    one, other = JobSerializer(), JobSerializer()
    mine, theirs = one.fields["header_names"], other.fields["header_names"]
    assert mine.child is not theirs.child
    assert mine.child.parent is mine and theirs.child.parent is theirs
