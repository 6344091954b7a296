"""A PEP 517 build backend for the codecell SDK, standard library only.

It lets `pip install ./clients/python` work with no network: pip needs no
setuptools or wheel from an index to build a pure-Python wheel of one package.
"""

import base64
import hashlib
import io
import os
import tarfile
import zipfile

NAME, VERSION = "codecell", "0.1.0"
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METADATA = f"""Metadata-Version: 2.1
Name: {NAME}
Version: {VERSION}
Summary: Python SDK for codecell, a self-hosted sandbox for untrusted code
Requires-Python: >=3.9
"""
WHEEL = "Wheel-Version: 1.0\nGenerator: codecell_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _sources():
    for root, _, files in os.walk(os.path.join(HERE, NAME)):
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(root, f)
                yield os.path.relpath(path, HERE), path


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = f"{NAME}-{VERSION}-py3-none-any.whl"
    info = f"{NAME}-{VERSION}.dist-info"
    record = []
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as whl:
        def add(arcname, data):
            whl.writestr(arcname, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{arcname},sha256={digest},{len(data)}")
        for arcname, path in _sources():
            with open(path, "rb") as f:
                add(arcname, f.read())
        add(f"{info}/METADATA", METADATA.encode())
        add(f"{info}/WHEEL", WHEEL.encode())
        record.append(f"{info}/RECORD,,")
        whl.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return name


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME}-{VERSION}"
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tar:
        for rel in ["pyproject.toml", "build_backend/codecell_build.py"] + [r for r, _ in _sources()]:
            tar.add(os.path.join(HERE, rel), arcname=f"{base}/{rel}")
        pkg_info = METADATA.encode()
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(pkg_info)
        tar.addfile(ti, io.BytesIO(pkg_info))
    return name
