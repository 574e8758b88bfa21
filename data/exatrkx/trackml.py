"""ACTS's TrackML-style CSV files of one event → flat numpy arrays of hits and particles.

One hit is one measurement (a cluster centre), as in the TrackML data set: global position, the
module it is on (volume/layer/module ids decoded from the ACTS geometry identifier), cell features
of its cluster, and the truth: the particle that made it and the hit's position along that
particle's trajectory. Particles carry their production vertex and initial kinematics.

All of it is vectorised: CSV columns are read with numpy, cluster features are segment reductions
over cells sorted by measurement, and particle barcodes are matched with ``searchsorted``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

#: ACTS GeometryIdentifier bit fields (shift, mask) of the ids written per hit
GEOMETRY_FIELDS = {"volume": (56, 0xFF), "layer": (36, 0xFFF), "module": (8, 0xFFFFF)}
#: ACTS barcode components, in CSV column order, and their bit widths when packed into one key
BARCODE = (("particle_id_pv", 12), ("particle_id_sv", 12), ("particle_id_part", 16), ("particle_id_gen", 8),
           ("particle_id_subpart", 16))


def read_csv(path: str | os.PathLike, columns: list[str], dtype: type = np.float64) -> dict[str, np.ndarray]:
    """Named columns of an ACTS CSV file (header line first); empty files give empty arrays."""
    path = Path(path)
    with path.open() as stream:
        header = stream.readline().strip().split(",")
    missing = [c for c in columns if c not in header]
    if missing:
        raise ValueError(f"{path}: no column(s) {missing}; header is {header}")
    usecols = [header.index(c) for c in columns]
    table = np.loadtxt(path, delimiter=",", skiprows=1, usecols=usecols, dtype=dtype, ndmin=2)
    return {name: table[:, i] for i, name in enumerate(columns)}


def barcode_key(table: dict[str, np.ndarray]) -> np.ndarray:
    """Packs the ACTS barcode columns into one uint64 per row (a sortable particle key)."""
    key = np.zeros(len(next(iter(table.values()))), dtype=np.uint64)
    for name, bits in BARCODE:
        key = (key << np.uint64(bits)) | table[name].astype(np.uint64)
    return key


def match_keys(keys: np.ndarray, table: np.ndarray) -> np.ndarray:
    """1-based row in ``table`` of each key (0 where the key is not in the table)."""
    if len(table) == 0 or len(keys) == 0:
        return np.zeros(len(keys), dtype=np.int64)
    order = np.argsort(table, kind="stable")
    pos = np.minimum(np.searchsorted(table, keys, sorter=order), len(table) - 1)
    return np.where(table[order[pos]] == keys, order[pos] + 1, 0).astype(np.int64)


def cluster_features(measurement_id: np.ndarray, channel0: np.ndarray, channel1: np.ndarray, value: np.ndarray,
                     n_measurements: int) -> dict[str, np.ndarray]:
    """Per-measurement cell count, summed activation, and cluster extent (in cells) along both local axes."""
    order = np.argsort(measurement_id, kind="stable")
    mid, ch0, ch1, val = measurement_id[order], channel0[order], channel1[order], value[order]
    count = np.bincount(mid, minlength=n_measurements)
    starts = np.concatenate([[0], np.cumsum(count)[:-1]])
    has = count > 0
    size0 = np.zeros(n_measurements, np.int64)
    size1 = np.zeros(n_measurements, np.int64)
    if has.any():
        s = starts[has]
        size0[has] = np.maximum.reduceat(ch0, s) - np.minimum.reduceat(ch0, s) + 1
        size1[has] = np.maximum.reduceat(ch1, s) - np.minimum.reduceat(ch1, s) + 1
    return {"cell_count": count.astype(np.int32), "cell_value": np.bincount(mid, val, n_measurements).astype(np.float32),
            "size0": size0.astype(np.int32), "size1": size1.astype(np.int32)}


def read_event(directory: str | os.PathLike, index: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Hits and particles of event ``index`` in an ACTS CSV directory.

    Returns:
        ``(hits, particles)``: dicts of equal-length arrays. Hit fields: x, y, z (mm), volume, layer,
        module, cell_count, cell_value, size0, size1, particle (1-based index into the particles, 0 if
        unknown), sequence (the hit's number along its particle's trajectory). Particle fields: id,
        pdg, q, vx, vy, vz (mm), px, py, pz, pt (GeV), eta, phi, nhits, primary (1 for a particle of
        the generator, 0 for a secondary such as a conversion electron).
    """
    stem = Path(directory) / f"event{index:09d}-"
    meas = read_csv(f"{stem}measurements.csv", ["measurement_id", "global_x", "global_y", "global_z"])
    geo = read_csv(f"{stem}measurements.csv", ["geometry_id"], dtype=np.uint64)["geometry_id"]
    n = len(geo)
    cells = read_csv(f"{stem}cells.csv", ["measurement_id", "channel0", "channel1"], dtype=np.int64)
    cell_value = read_csv(f"{stem}cells.csv", ["value"])["value"]
    simhit_map = read_csv(f"{stem}measurement-simhit-map.csv", ["measurement_id", "hit_id"], dtype=np.int64)
    simhits = read_csv(f"{stem}hits.csv", [name for name, _ in BARCODE] + ["index"], dtype=np.uint64)
    particles = read_csv(f"{stem}particles_simulated.csv", [name for name, _ in BARCODE], dtype=np.uint64)
    kin = read_csv(f"{stem}particles_simulated.csv", ["particle_type", "q", "vx", "vy", "vz", "px", "py", "pz"])

    hits: dict[str, np.ndarray] = {
        "x": meas["global_x"].astype(np.float32), "y": meas["global_y"].astype(np.float32),
        "z": meas["global_z"].astype(np.float32)}
    for name, (shift, mask) in GEOMETRY_FIELDS.items():
        hits[name] = ((geo >> np.uint64(shift)) & np.uint64(mask)).astype(np.int32)
    hits.update(cluster_features(cells["measurement_id"], cells["channel0"], cells["channel1"], cell_value, n))

    # truth: the first sim hit of each measurement (merged clusters keep their first contributor)
    mid, first = np.unique(simhit_map["measurement_id"], return_index=True)
    simhit = np.full(n, -1, dtype=np.int64)
    simhit[mid] = simhit_map["hit_id"][first]
    particle_keys = barcode_key(particles)
    matched = simhit >= 0
    safe = np.where(matched, simhit, 0)
    hits["particle"] = np.where(matched, match_keys(barcode_key(simhits)[safe], particle_keys), 0)
    found = hits["particle"] > 0
    hits["sequence"] = np.where(found, simhits["index"][safe].astype(np.int64), -1).astype(np.int32)

    px, py, pz = kin["px"], kin["py"], kin["pz"]
    pt = np.hypot(px, py)
    parts = {"id": np.arange(1, len(particle_keys) + 1, dtype=np.int64), "pdg": kin["particle_type"].astype(np.int32),
             "q": kin["q"].astype(np.int32), "vx": kin["vx"].astype(np.float32), "vy": kin["vy"].astype(np.float32),
             "vz": kin["vz"].astype(np.float32), "px": px.astype(np.float32), "py": py.astype(np.float32),
             "pz": pz.astype(np.float32), "pt": pt.astype(np.float32),
             "eta": np.arcsinh(np.divide(pz, pt, out=np.zeros_like(pz), where=pt > 0)).astype(np.float32),
             "phi": np.arctan2(py, px).astype(np.float32),
             "nhits": np.bincount(hits["particle"], minlength=len(particle_keys) + 1)[1:].astype(np.int32),
             "primary": ((particles["particle_id_sv"] == 0) & (particles["particle_id_gen"] == 0)).astype(np.int32)}
    return hits, parts
