"""A parameter archive's mapping at load (runtime/archive_pages.py), on
plain files: every page mapped, a big file on huge pages where the host
maps files so, and nothing left mapped by a load that fails."""

import errno

import pytest

import anyshape.runtime.archive_pages as archive_pages
from huge_pages import (host_maps_files_on_huge_pages, huge_mapped_bytes, mapping_fields,
                        written_in_small_pieces)


@pytest.fixture
def big_from_16_mib(monkeypatch):
    """Files of 16 MiB or more count as big (1 GiB by default), read again
    4 MiB first (64 MiB by default)."""
    monkeypatch.setattr(archive_pages, "HUGE_PAGES_FROM_BYTES", 16 << 20)
    monkeypatch.setattr(archive_pages, "PROBE_BYTES", 4 << 20)


@pytest.fixture
def huge_page_host(tmp_path):
    if not host_maps_files_on_huge_pages(tmp_path):
        pytest.skip("this host does not map a file's page cache on 2 MiB pages")


def test_a_big_file_held_in_small_pieces_is_mapped_on_huge_pages(
        tmp_path, big_from_16_mib, huge_page_host):
    """/// Its first 4 MiB read again come back on huge pages, and so the rest
    /// is read again too: more than half of the file is on them after."""
    path = tmp_path / "params.irpa"
    data = written_in_small_pieces(path, 24 << 20)
    pages = archive_pages.mapped_archive(path)
    try:
        assert huge_mapped_bytes(path) >= len(data) // 2, mapping_fields(path)
        assert int(mapping_fields(path)["Rss"].split()[0]) * 1024 == len(data)
        assert pages[:] == data
    finally:
        pages.close()


def test_a_small_file_is_mapped_without_asking_for_huge_pages(tmp_path):
    """/// Under 1 GiB nothing is asked of the page cache (no ``hg`` among the
    /// mapping's flags: MADV_HUGEPAGE) and nothing is read again; every page
    /// is mapped all the same."""
    path = tmp_path / "params.irpa"
    data = written_in_small_pieces(path, 8 << 20)
    pages = archive_pages.mapped_archive(path)
    try:
        fields = mapping_fields(path)
        assert "hg" not in fields["VmFlags"].split(), fields
        assert int(fields["Rss"].split()[0]) * 1024 == len(data)
        assert pages[:] == data
    finally:
        pages.close()


def test_a_file_that_cannot_be_written_out_is_mapped_as_it_is(
        tmp_path, big_from_16_mib, huge_page_host, monkeypatch):
    """/// A read-only image's file system has no fsync (EINVAL): the load
    /// keeps the small pieces and maps every page, rather than fail."""
    path = tmp_path / "params.irpa"
    data = written_in_small_pieces(path, 24 << 20)
    asked = []

    def no_fsync(descriptor):
        asked.append(descriptor)
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(archive_pages.os, "fdatasync", no_fsync)
    pages = archive_pages.mapped_archive(path)
    try:
        assert asked
        assert int(mapping_fields(path)["Rss"].split()[0]) * 1024 == len(data)
        assert pages[:] == data
    finally:
        pages.close()


def test_a_load_that_fails_leaves_nothing_mapped(tmp_path, monkeypatch):
    """/// Its traceback, kept (a REPL's last one), holds the load's frames:
    /// their mapping is closed all the same."""
    path = tmp_path / "params.irpa"
    written_in_small_pieces(path, 4 << 20)

    def interrupted(pages, advanced=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(archive_pages, "map_every_page", interrupted)
    with pytest.raises(KeyboardInterrupt) as caught:
        archive_pages.mapped_archive(path)
    assert caught.value.__traceback__ is not None
    assert mapping_fields(path) == {}


@pytest.mark.parametrize("given, expected", [
    ("33554432\n", 32 << 20),        # arm64 with 16 KiB pages
    ("536870912\n", 512 << 20),      # arm64 with 64 KiB pages
    (None, 2 << 20),                 # no such file: an older kernel
    ("never\n", 2 << 20), ("0\n", 2 << 20), ("1000\n", 2 << 20)])
def test_the_huge_page_size_is_the_one_the_kernel_gives(tmp_path, monkeypatch, given, expected):
    """/// The kernel's hpage_pmd_size where it gives a whole number of pages,
    /// else 2 MiB (x86-64's)."""
    size_file = tmp_path / "hpage_pmd_size"
    if given is not None:
        size_file.write_text(given)
    monkeypatch.setattr(archive_pages, "_HUGE_PAGE_SIZE", size_file)
    assert archive_pages.huge_page_bytes() == expected


@pytest.mark.parametrize("huge_page, read_again", [(2 << 20, True), (1 << 40, False)])
def test_only_a_mapping_on_the_kernels_huge_page_boundary_is_read_again(
        tmp_path, big_from_16_mib, monkeypatch, huge_page, read_again):
    """/// A mapping placed 2 MiB past 1 TiB starts on a 2 MiB page's boundary,
    /// not on a 1 TiB one's: with the kernel's pages of 1 TiB the file is not
    /// dropped and read again; every page is mapped either way."""
    if "[never]" in archive_pages._TRANSPARENT_HUGE_PAGES.read_text():
        pytest.skip("transparent huge pages are off on this host")
    size_file = tmp_path / "hpage_pmd_size"
    size_file.write_text(f"{huge_page}\n")
    monkeypatch.setattr(archive_pages, "_HUGE_PAGE_SIZE", size_file)
    monkeypatch.setattr(archive_pages, "_address", lambda pages: (1 << 40) + (2 << 20))
    asked = []
    monkeypatch.setattr(archive_pages, "_onto_huge_pages",
                        lambda pages, descriptor: asked.append(descriptor))
    path = tmp_path / "params.irpa"
    data = written_in_small_pieces(path, 24 << 20)
    pages = archive_pages.mapped_archive(path)
    try:
        assert bool(asked) == read_again
        assert int(mapping_fields(path)["Rss"].split()[0]) * 1024 == len(data)
        assert pages[:] == data
    finally:
        pages.close()
