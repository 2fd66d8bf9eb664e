"""scripts/sanitizer_summary.py: what counts as a kernel error in compute-sanitizer logs."""
import importlib.util
import pathlib

import pytest

_PATH = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "sanitizer_summary.py"
_spec = importlib.util.spec_from_file_location("sanitizer_summary", _PATH)
summary = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(summary)

_PROBE = ('========= Program hit CUDA_ERROR_INVALID_VALUE (error 1) due to "invalid argument" on CUDA API call '
          'to cuGetProcAddress_v2.\n=========     Saved host backtrace up to driver entry point at error\n')
_INVALID_READ = ("========= Invalid __global__ read of size 4 bytes\n=========     at song_search+0x1a0\n"
                 "=========     by thread (3,0,0) in block (7,0,0)\n")
_HAZARD = ("========= Error: Race reported between Write access at refine+0x90\n"
           "=========     and Read access at refine+0x120 [128 hazards]\n")


def _log(tmp_path, name, body, done=True):
    p = tmp_path / name
    p.write_text("========= COMPUTE-SANITIZER\n" + body + ("sanitizer workload done in 1 s\n" if done else ""))
    return str(p)


@pytest.mark.parametrize("body, tail, rc", [
    (_PROBE * 3, "========= ERROR SUMMARY: 3 errors\n", 0),  # numba's driver probing only
    ("", "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n", 0),
    (_PROBE + _INVALID_READ, "========= ERROR SUMMARY: 2 errors\n", 1),
    (_HAZARD, "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n", 1),
])
def test_counts_kernel_errors_and_hazards_not_driver_probing(tmp_path, capsys, body, tail, rc):
    assert summary.main([_log(tmp_path, "a.log", body + tail)]) == rc
    out = capsys.readouterr().out
    assert f"{rc and 1 or 0} kernel errors/hazards counted" in out


def test_an_unfinished_workload_fails(tmp_path, capsys):
    assert summary.main([_log(tmp_path, "a.log", "========= ERROR SUMMARY: 0 errors\n", done=False)]) == 1
    assert "DID NOT COMPLETE" in capsys.readouterr().out
