"""A real model's weights on a GPU node: exactly the files its recipe loads, pulled at its pinned revision
and checked byte for byte (``genworker weights pull`` / ``genworker weights verify``).

What a model loads (``needed``):

- its pipeline repo (``spec.weights`` at ``spec.revision``): ``model_index.json`` and every component folder
  it names, with the files ``from_pretrained`` reads there (configs, tokenizer files, the default
  ``*.safetensors`` shards and their index). Never the dtype variants (``*.fp16.safetensors``: the adapters
  load no ``variant=``), pickled weights (``*.bin``, ``*.pth``) or the single-file checkpoints some repos keep
  at their root beside the diffusers layout (LTX-2's ``ltx-2-19b-*.safetensors``), which are tens of GB;
- LTX-2's two-stage recipe: its latent upsampler folder and the distilled LoRA file of the same repo; LTX-2.5's
  diffusion decoder folder; an entry's own transformer folder in place of the index's (``ModelSpec.transformer``:
  ltx-2.5-dev's ``transformer_full/``, never the distilled ``transformer/`` beside it);
- each variant LoRA file (``lora.weights`` at ``lora.revision``);
- a ``chat_llm`` prompt extender's repo (``prompt_extend.llm`` at ``llm_revision``).

Each repo lands in ``<models.weights_dir>/<hub id>`` (where ``pipelines.runtime.registry.resolve_weights``
looks first) with a manifest, ``genworker-weights.json``: the commit, and every file's size, its sha256 and
the git blob sha1 the hub lists for a non-LFS file (an earlier pull of the same commit by another entry keeps
its files there: two entries may load different parts of one repo). A file's sha256 is the one its source states
(the hub's LFS hash, a mirror blob's name) or, where the source names none (a mirror copied with its links
dereferenced, a non-LFS file), computed from the source's bytes: a manifest never lacks one, so ``verify`` always
hashes.
``verify`` holds the directory to that manifest and to what the model needs; the worker holds it to the
catalog's pin at every load (``pin_problems``). The source is the hub, or a local mirror laid out like the hub
cache (``--from-cache``: an operator's shared cache, and how the tests run offline). A mirror file already in
place with the same sha256 is not copied again; a mirror link, or a manifest path, that resolves outside its
folder is refused.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pipelines.errors import ModelLoadError

if TYPE_CHECKING:
    from foundation.core.catalog import ModelSpec

__all__ = ["MANIFEST", "RepoFiles", "needed", "pin_problems", "pull", "verify"]

MANIFEST = "genworker-weights.json"
# What from_pretrained reads in a component folder (transformers and diffusers, tokenizers included).
_COMPONENT_FILES = ("*.json", "*.txt", "*.model", "*.tiktoken", "*.jinja", "*.safetensors")
# Never loaded: dtype variants (diffusers/transformers ``variant=``), their indexes, and pickled weights.
_NEVER = ("*.*.safetensors", "*.index.*.json", "*.bin", "*.pt", "*.pth", "*.ckpt", "*.onnx", "*.msgpack", "*.h5")
_LLM_FILES = ("*.json", "*.txt", "*.model", "*.tiktoken", "*.jinja", "*.safetensors", "merges.txt", "vocab.*")
_CHUNK = 8 << 20
Progress = Callable[[str], None]


class _Hasher(Protocol):
    def update(self, data: bytes, /) -> None: ...

    def hexdigest(self) -> str: ...


@dataclass(frozen=True)
class RepoFiles:
    """One hub repo at one revision, and the files of it a model loads (``fnmatch`` patterns, as the hub
    client filters them). ``components_from_index``: the folders ``model_index.json`` names load too, except
    ``replaced`` ones (read from another folder: ``ModelSpec.transformer``)."""

    repo: str
    revision: str | None
    allow: tuple[str, ...]
    ignore: tuple[str, ...] = _NEVER
    components_from_index: bool = False
    replaced: tuple[str, ...] = ()


@dataclass(frozen=True)
class SourceFile:
    """A file as its source states it: size, and the hash the hub keeps of it."""

    path: str
    size: int
    sha256: str | None  # stated (LFS files, mirror blobs) or computed; None only before ``pull`` fills it in
    git_sha1: str | None  # non-LFS files on the hub (git blob id)


def needed(spec: ModelSpec) -> list[RepoFiles]:
    """Every repo ``spec`` loads from, with the files of each."""
    if spec.tiny:
        raise ModelLoadError(f"{spec.id} is a tiny model: it is built offline (make tiny-models), not pulled")
    main = ["model_index.json"]
    if spec.two_stage is not None:
        main += [f"{spec.two_stage.upsampler}/{pattern}" for pattern in _COMPONENT_FILES]
        if spec.two_stage.distilled_lora is not None:
            main.append(spec.two_stage.distilled_lora)
    if spec.diffusion_decoder is not None:  # read by the adapter, not by the pipeline (pipelines/families/ltx2.py)
        main += [f"{spec.diffusion_decoder}/{pattern}" for pattern in _COMPONENT_FILES]
    replaced: tuple[str, ...] = ()
    if spec.transformer is not None:  # LTX-2.5's full model: its folder in place of the index's transformer/
        main += [f"{spec.transformer}/{pattern}" for pattern in _COMPONENT_FILES]
        replaced = ("transformer",)
    repos = [RepoFiles(spec.weights, spec.revision, tuple(main), components_from_index=True, replaced=replaced)]
    for mode in spec.modes.values():
        for variant in mode.variants.values():
            lora = variant.lora
            if lora is not None:
                names = tuple(name for name in (lora.weight_name, lora.weight_name_2) if name)
                repos.append(RepoFiles(lora.weights, lora.revision, names, ignore=()))
    extend = spec.prompt_extend
    if extend is not None and extend.method == "chat_llm" and extend.llm:
        repos.append(RepoFiles(extend.llm, extend.llm_revision, _LLM_FILES))
    return _merged(repos)


def _merged(repos: list[RepoFiles]) -> list[RepoFiles]:
    """One entry per repo and revision (two variants' LoRAs often share a repo)."""
    by_key: dict[tuple[str, str | None], RepoFiles] = {}
    for repo in repos:
        key = (repo.repo, repo.revision)
        old = by_key.get(key)
        if old is None:
            by_key[key] = repo
        else:
            allow = old.allow + tuple(p for p in repo.allow if p not in old.allow)
            by_key[key] = dataclasses.replace(old, allow=allow)
    return list(by_key.values())


def selected(wanted: RepoFiles, paths: Iterable[str], model_index: dict[str, object] | None) -> list[str]:
    """The paths of ``wanted`` among ``paths`` (the repo's listing at its revision)."""
    allow = list(wanted.allow)
    for name in _index_components(wanted, model_index):
        allow += [f"{name}/{pattern}" for pattern in _COMPONENT_FILES]
    # A file named outright is always wanted: ``ignore`` filters what the wildcards match (a dtype variant
    # ``model.fp16.safetensors``), not a name such as ``ltx-2.5-22b-distilled-lora-450-bf16.safetensors``.
    return sorted(
        path
        for path in paths
        if path in wanted.allow
        or (any(fnmatch.fnmatch(path, p) for p in allow) and not any(fnmatch.fnmatch(path, p) for p in wanted.ignore))
    )


# ------------------------------------------------------------------------------------------------- pull
def pull(
    spec: ModelSpec, weights_dir: Path, *, from_cache: Path | None = None, progress: Progress = print
) -> list[Path]:
    """Fetch what ``spec`` loads into ``weights_dir`` and write each repo's manifest; the copies are checked
    against their source's hashes before the manifest says they are good. Returns the repo folders."""
    folders = []
    for wanted in needed(spec):
        source = _CacheMirror(from_cache, wanted) if from_cache is not None else _Hub(wanted, spec.id)
        folder = weights_dir / wanted.repo
        files = source.fetch(folder, progress)
        problems = list(_check(folder, files, quick=False, progress=progress))
        if problems:
            raise ModelLoadError(f"{wanted.repo}: the pulled files do not match their source: {problems[0]}")
        # A hub file without LFS is stated by its git blob id only, just checked: its sha256 comes from its bytes.
        files = [_with_sha256(folder, f) for f in files]
        manifest = {
            "repo": wanted.repo,
            "revision": source.commit,
            "files": {
                **_earlier_files(folder, source.commit),
                **{f.path: {"size": f.size, "sha256": f.sha256, "git_sha1": f.git_sha1} for f in files},
            },
        }
        (folder / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        progress(f"{wanted.repo}@{source.commit}: {len(files)} files, {sum(f.size for f in files) / 1e9:.2f} GB")
        folders.append(folder)
    return folders


def _earlier_files(folder: Path, commit: str) -> dict[str, object]:
    """The files an earlier pull of the same commit put in ``folder`` (another entry of the same repo: ltx-2.5 and
    ltx-2.5-dev load different transformers of one repo), kept in its manifest beside this pull's; a pull of
    another commit keeps none."""
    path = folder / MANIFEST
    if not path.is_file():
        return {}
    earlier = json.loads(path.read_text(encoding="utf-8"))
    files: dict[str, object] = earlier.get("files", {})
    return files if earlier.get("revision") == commit else {}


class _CacheMirror:
    """A directory laid out like the hub cache (``models--org--name/{refs,snapshots,blobs}``): a snapshot's
    files link to blobs named by their hash (sha256 for LFS files, git blob sha1 for the rest)."""

    def __init__(self, cache_dir: Path, wanted: RepoFiles) -> None:
        from huggingface_hub import snapshot_download

        self.wanted = wanted
        try:
            snapshot = snapshot_download(
                wanted.repo, revision=wanted.revision, cache_dir=cache_dir, local_files_only=True
            )
        except Exception as e:  # the hub client's "not in the cache" errors
            raise ModelLoadError(f"{wanted.repo}@{wanted.revision or 'main'} is not in the mirror {cache_dir}") from e
        self.snapshot = Path(snapshot)
        self.commit = self.snapshot.name

    def fetch(self, folder: Path, progress: Progress) -> list[SourceFile]:
        listing = [p.relative_to(self.snapshot).as_posix() for p in self.snapshot.rglob("*") if p.is_file()]
        index = self.snapshot / "model_index.json"
        model_index = json.loads(index.read_text(encoding="utf-8")) if index.is_file() else None
        files = []
        for path in selected(self.wanted, listing, model_index):
            source = self._source(path)
            target = folder / path
            if _same_bytes(target, source):
                progress(f"have {self.wanted.repo}/{path}")
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                progress(f"copy {self.wanted.repo}/{path}")
                shutil.copyfile(self.snapshot / path, target)
            files.append(source)
        return files

    def _source(self, path: str) -> SourceFile:
        """``path`` as the mirror states it: the hash its blob is named by, else the sha256 of its bytes (a copy
        of the cache made with links dereferenced names nothing)."""
        link = self.snapshot / path
        real = Path(os.path.realpath(link))
        root = Path(os.path.realpath(self.snapshot.parent.parent))  # models--org--name
        if not real.is_relative_to(root):
            raise ModelLoadError(f"{self.wanted.repo}: {path} in the mirror links outside it, to {real}")
        size = real.stat().st_size
        named = link.is_symlink() and real.parent == root / "blobs"
        if named and len(real.name) == 64:
            return SourceFile(path, size, sha256=real.name, git_sha1=None)
        git_sha1 = real.name if named and len(real.name) == 40 else None
        return SourceFile(path, size, sha256=_digest(real, hashlib.sha256()), git_sha1=git_sha1)


# The hub client's transport errors (its httpx's TransportError family, the socket's OSError) and its refusal under
# HF_HUB_OFFLINE, matched by class name: the client's HTTP library is its own choice and changes between releases.
_UNREACHABLE = frozenset({"TransportError", "OfflineModeIsEnabled"})


@contextmanager
def _reaching_hub(repo: str, model: str) -> Iterator[None]:
    """Tells a hub that cannot be reached in one sentence: which host, and the offline way (``--from-cache``)."""
    try:
        yield
    except Exception as e:
        if not (isinstance(e, OSError) or {c.__name__ for c in type(e).__mro__} & _UNREACHABLE):
            raise
        from huggingface_hub import constants

        raise ModelLoadError(
            f"cannot reach the hub at {constants.ENDPOINT} for {repo} ({e}); on a machine without access, copy "
            f"from a directory laid out like the hub cache: genworker weights pull {model} --from-cache DIR"
        ) from e


class _Hub:
    """The hub itself: the listing with its hashes from the API, the files through the hub client (with its
    own progress bars), into ``folder`` directly."""

    def __init__(self, wanted: RepoFiles, model: str) -> None:
        from huggingface_hub import HfApi

        self.wanted = wanted
        self.model = model
        self.api = HfApi()
        with _reaching_hub(wanted.repo, model):
            info = self.api.model_info(wanted.repo, revision=wanted.revision)
        if info.sha is None:
            raise ModelLoadError(f"{wanted.repo}: the hub states no commit for revision {wanted.revision!r}")
        self.commit = info.sha

    def fetch(self, folder: Path, progress: Progress) -> list[SourceFile]:
        with _reaching_hub(self.wanted.repo, self.model):
            return self._fetch(folder, progress)

    def _fetch(self, folder: Path, progress: Progress) -> list[SourceFile]:
        from huggingface_hub import RepoFile, hf_hub_download, snapshot_download

        listing = {
            entry.path: entry
            for entry in self.api.list_repo_tree(self.wanted.repo, revision=self.commit, recursive=True)
            if isinstance(entry, RepoFile)
        }
        model_index = None
        if self.wanted.components_from_index and "model_index.json" in listing:
            index = hf_hub_download(self.wanted.repo, "model_index.json", revision=self.commit, local_dir=folder)
            model_index = json.loads(Path(index).read_text(encoding="utf-8"))
        paths = selected(self.wanted, listing, model_index)
        progress(f"pull {self.wanted.repo}@{self.commit}: {len(paths)} files")
        snapshot_download(self.wanted.repo, revision=self.commit, local_dir=folder, allow_patterns=paths)
        files = []
        for path in paths:
            entry = listing[path]
            lfs = entry.lfs
            files.append(
                SourceFile(
                    path,
                    entry.size,
                    sha256=lfs.sha256 if lfs is not None else None,
                    git_sha1=entry.blob_id if lfs is None else None,
                )
            )
        return files


def _same_bytes(target: Path, source: SourceFile) -> bool:
    """``target`` already holds ``source``'s bytes (an interrupted pull resumes without copying them again)."""
    if not target.is_file() or target.is_symlink() or target.stat().st_size != source.size:
        return False
    return source.sha256 is not None and _digest(target, hashlib.sha256()) == source.sha256


def _with_sha256(folder: Path, f: SourceFile) -> SourceFile:
    if f.sha256 is not None:
        return f
    return SourceFile(f.path, f.size, sha256=_digest(folder / f.path, hashlib.sha256()), git_sha1=f.git_sha1)


# ----------------------------------------------------------------------------------------------- verify
def verify(spec: ModelSpec, weights_dir: Path, *, quick: bool = False, progress: Progress = print) -> list[str]:
    """What is wrong with ``spec``'s weights under ``weights_dir`` (empty: all there and intact). ``quick``
    checks presence and sizes only (hashing reads every byte)."""
    problems: list[str] = []
    for wanted in needed(spec):
        folder = weights_dir / wanted.repo
        manifest_path = folder / MANIFEST
        if not manifest_path.is_file():
            problems.append(f"{wanted.repo}: not pulled (no {MANIFEST} in {folder})")
            continue
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        if wanted.revision is not None and manifest["revision"] != wanted.revision:
            problems.append(f"{wanted.repo}: pulled at {manifest['revision']}, the catalog pins {wanted.revision}")
        files = [SourceFile(path, **facts) for path, facts in manifest["files"].items()]
        index_path = folder / "model_index.json"
        model_index = json.loads(index_path.read_text(encoding="utf-8")) if index_path.is_file() else None
        listed = [f.path for f in files]
        for pattern in _required(wanted, model_index):
            if not any(fnmatch.fnmatch(path, pattern) for path in listed):
                problems.append(f"{wanted.repo}: nothing pulled matches {pattern!r}")
        problems += [f"{wanted.repo}: {problem}" for problem in _check(folder, files, quick=quick, progress=progress)]
    return problems


def pin_problems(folder: Path, revision: str | None) -> list[str]:
    """What ``folder``'s manifest shows against the catalog's pin, cheaply enough for every load: the commit it
    was pulled at, and files missing or of another size (a half-finished copy). Hashes are ``verify``'s job.
    A folder without a manifest was not pulled by genworker: nothing to hold it to."""
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        return []
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    problems = []
    if revision is not None and manifest.get("revision") != revision:
        problems.append(f"pulled at {manifest.get('revision')}, the catalog pins {revision}")
    files = [SourceFile(path, **facts) for path, facts in manifest["files"].items()]
    return problems + list(_check(folder, files, quick=True, progress=lambda line: None))


def _required(wanted: RepoFiles, model_index: dict[str, object] | None) -> list[str]:
    """Patterns that must each match a pulled file: named files, and every component's config."""
    named = [p for p in wanted.allow if not any(ch in p for ch in "*?[")]
    return named + [f"{name}/*.json" for name in _index_components(wanted, model_index)]


def _index_components(wanted: RepoFiles, model_index: dict[str, object] | None) -> list[str]:
    """The component folders of ``model_index.json`` that ``wanted`` loads (none without an index)."""
    if not wanted.components_from_index or model_index is None:
        return []
    return [
        name
        for name, value in model_index.items()
        if not name.startswith("_")
        and isinstance(value, list)
        and value
        and value[0] is not None
        and name not in wanted.replaced
    ]


def _check(folder: Path, files: list[SourceFile], *, quick: bool, progress: Progress) -> Iterator[str]:
    root = Path(os.path.realpath(folder))
    for f in files:
        path = folder / f.path
        if not Path(os.path.realpath(path)).is_relative_to(root):  # "../x" in a manifest, or a link out
            yield f"{f.path}: resolves outside {folder}"
            continue
        if not path.is_file():
            yield f"{f.path}: missing"
            continue
        if path.stat().st_size != f.size:
            yield f"{f.path}: {path.stat().st_size} bytes, expected {f.size}"
            continue
        if quick:
            continue
        if f.size > 1 << 30:
            progress(f"hash {f.path} ({f.size / 1e9:.1f} GB)")
        if f.sha256 is None and f.git_sha1 is None:  # a manifest from before sha256 was always computed
            yield f"{f.path}: the manifest states no hash to check (pull it again)"
        elif f.sha256 is not None and _digest(path, hashlib.sha256()) != f.sha256:
            yield f"{f.path}: sha256 differs from the source's"
        elif f.git_sha1 is not None and _git_blob_sha1(path, f.size) != f.git_sha1:
            yield f"{f.path}: git blob id differs from the source's"


def _digest(path: Path, h: _Hasher) -> str:
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _git_blob_sha1(path: Path, size: int) -> str:
    """git's object id of a file: sha1 over ``blob <size>\\0`` and the bytes (what the hub lists for a non-LFS
    file)."""
    h = hashlib.sha1(f"blob {size}\0".encode(), usedforsecurity=False)
    return _digest(path, h)
