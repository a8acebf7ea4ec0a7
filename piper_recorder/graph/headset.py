"""Which headset the graph talks to (``headset_kind``), and the settings of those the graph starts itself.

The kinds: native app, WebXR page, simulated, or none for a SpaceMouse; the graph starts the simulated
headset (``SimQuestSettings``) and the WebXR page's relay (``QuestWebSettings``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from piper_recorder.dashboard.model import is_loopback
from piper_recorder.params.derived import LAUNCH_SECTION
from piper_recorder.quest.client import DEFAULT_HOST, DEFAULT_PORT
from piper_recorder.quest.sim_server import SimConfig
from piper_recorder.quest.video import VIDEO_PORT
from piper_recorder.quest.web_server import WebConfig, port_clash

from .arguments import flag, teleop_input
from .errors import LaunchError

HEADSETS = ("native", "web", "sim")


def _launch_settings(cfg: Mapping[str, Mapping[str, Any]], name: str, settings: type) -> dict[str, Any]:
    """``piper_launch.<name>`` as given, refusing any setting the ``settings`` dataclass does not have."""
    section = dict(cfg.get(LAUNCH_SECTION, {}).get(name, {}))
    unknown = set(section) - {f.name for f in fields(settings)}
    if unknown:
        raise LaunchError(f"{LAUNCH_SECTION}.{name}: unknown settings {sorted(unknown)}")
    return section


@dataclass(frozen=True)
class SimQuestSettings:
    """``piper_launch.sim_quest``: the simulated headset of the sim graph.

    Defaults are its own, except
    ``buttons``: the graph drives episodes through the recorders' services). ``enabled`` false (or the
    launch argument ``sim_headset:=false``, ``piper-launch sim --no-sim-headset``): no simulated
    headset; quest_bridge and quest_video keep their own host/port, for a real headset.
    """

    enabled: bool = True
    host: str = SimConfig.host
    port: int = SimConfig.port  # 0 = piper-launch picks a free port
    script: str = SimConfig.script
    rate: float = SimConfig.rate
    buttons: bool = False
    video_port: int = VIDEO_PORT  # the app's video/HUD channel (quest_video); 0 = a free port
    report: str = ""  # write what the headset received to this JSON file (tests)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Mapping[str, Any]]) -> SimQuestSettings:
        """The settings of a config's ``piper_launch.sim_quest`` section (unknown keys refused)."""
        return cls(**_launch_settings(cfg, "sim_quest", cls))

    def argv(self, video: bool = False, two_hands: bool = False) -> list[str]:
        """piper-sim-quest's command-line arguments.

        ``video``: also accept quest_video's channel; ``two_hands``: move the left controller too (two arms).
        """
        out = [
            "--host",
            str(self.host),
            "--port",
            str(self.port),
            "--script",
            str(self.script),
            "--rate",
            str(self.rate),
        ]
        out += [] if self.buttons else ["--no-buttons"]
        out += ["--two-hands"] if two_hands else []
        out += ["--video-port", str(self.video_port)] if video else []
        return out + (["--report", self.report] if self.report else [])


@dataclass(frozen=True)
class QuestWebSettings:
    """``piper_launch.quest_web``: the WebXR headset page (``headset:=web``).

    It listens where quest_bridge
    and quest_video connect (their own host/port, as the native app's servers), so no node parameter
    changes with it; ``port`` is the page's (``adb reverse tcp:PORT tcp:PORT``, then
    ``http://localhost:PORT`` in the Quest Browser), ``cert``/``key`` serve HTTPS for LAN use.
    """

    host: str = WebConfig.host
    port: int = WebConfig.port
    cert: str = WebConfig.cert
    key: str = WebConfig.key
    allowed_hosts: tuple[str, ...] = ()  # DNS names the page may be reached by (LAN use; Host check)
    insecure_http: bool = False  # plain HTTP on a non-loopback host (WebConfig.insecure_http)
    report: str = ""  # write the relay's counters to this JSON file (tests)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Mapping[str, Any]]) -> QuestWebSettings:
        """The settings of a config's ``piper_launch.quest_web`` section (unknown keys refused)."""
        section = _launch_settings(cfg, "quest_web", cls)
        section["allowed_hosts"] = tuple(section.get("allowed_hosts") or ())
        return cls(**section)

    def check(self, cfg: Mapping[str, Mapping[str, Any]], video: bool) -> None:
        """Refuse while planning what piper-quest-web would refuse at its start.

        That is a non-loopback host without a certificate (unless ``insecure_http``). And the relay binds the page's port and, on quest_bridge's
        host, quest_bridge's and quest_video's: two of them on one port would fail only at the bind
        (``address already in use``); refused here, naming both.
        """
        if not is_loopback(str(self.host)) and not self.cert and not flag(self.insecure_http, False):
            raise LaunchError(
                f"{LAUNCH_SECTION}.quest_web.host={self.host!r} is not a loopback address: set "
                f"{LAUNCH_SECTION}.quest_web.cert and .key (HTTPS), or .insecure_http=true to serve "
                "plain HTTP on that network anyway (anyone on it can open the page and drive the arm)"
            )
        bridge_host = str(cfg.get("quest_bridge", {}).get("host", DEFAULT_HOST))
        ends = {
            f"{LAUNCH_SECTION}.quest_web.port": (str(self.host), int(self.port)),
            "quest_bridge.port": (bridge_host, int(cfg.get("quest_bridge", {}).get("port", DEFAULT_PORT))),
        }
        if video:
            ends["quest_video.port"] = (bridge_host, int(cfg.get("quest_video", {}).get("port", VIDEO_PORT)))
        clash = port_clash(ends)
        if clash:
            a, b = clash
            raise LaunchError(
                f"{a}={ends[a][1]} and {b}={ends[b][1]}: headset:=web's relay (quest_web) binds both, "
                "on one port; give the page another port (the bridge's and the video channel's are "
                "where quest_bridge and quest_video connect)"
            )

    def argv(self, cfg: Mapping[str, Mapping[str, Any]], video: bool) -> list[str]:
        """piper-quest-web's arguments: the page's address, and quest_bridge's / quest_video's endpoints."""
        bridge = cfg.get("quest_bridge", {})
        out = [
            "--host",
            str(self.host),
            "--port",
            str(self.port),
            "--bridge-host",
            str(bridge.get("host", DEFAULT_HOST)),
            "--bridge-port",
            str(bridge.get("port", DEFAULT_PORT)),
            "--video-port",
            str(cfg.get("quest_video", {}).get("port", VIDEO_PORT)) if video else "-1",
        ]
        out += ["--cert", str(self.cert), "--key", str(self.key)] if self.cert or self.key else []
        out += [a for name in self.allowed_hosts for a in ("--allowed-host", str(name))]
        out += ["--insecure-http"] if flag(self.insecure_http, False) else []
        return out + (["--report", self.report] if self.report else [])


def headset_kind(
    mode: str,
    cfg: Mapping[str, Mapping[str, Any]],
    sim_headset: str | bool = "",
    headset: str = "",
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """Which headset the graph talks to.

    "none" when teleop follows a SpaceMouse (``teleop_input``), else the
    launch argument ``headset`` (native | web | sim), else sim in sim mode unless ``sim_headset`` ("" =
    ``piper_launch.sim_quest.enabled``, default true) is false, else native. Settings that contradict each
    other are refused before anything starts, naming both (a SpaceMouse graph and a headset asked for, the
    simulated headset asked for and turned off, ...), never resolved by one silently winning.
    """
    if headset and headset not in HEADSETS:
        raise LaunchError(f"headset must be one of {' | '.join(HEADSETS)}, got {headset!r}")
    asked_sim = None if sim_headset == "" else flag(sim_headset, False)  # None: not given
    if teleop_input(cfg, overrides) != "headset":
        given = ([_HEADSET_ARG.format(headset)] if headset else []) + (["sim_headset:=true"] if asked_sim else [])
        if given:
            raise LaunchError(
                f"{' and '.join(given)} contradict{'s' if len(given) == 1 else ''} teleop input "
                "spacemouse (teleop.input, --teleop-input, teleop_input:=): a SpaceMouse graph starts "
                "no headset node; drop the headset setting or teleop_input"
            )
        return "none"
    if headset:
        if headset == "sim" and mode != "sim":
            raise LaunchError("headset:=sim needs the sim graph (the robot has a real headset: native or web)")
        if headset != "sim" and asked_sim:
            raise LaunchError(f"headset:={headset} and sim_headset:=true contradict each other")
        if headset == "sim" and asked_sim is False:
            raise LaunchError(
                f"{_HEADSET_ARG.format('sim')} and --no-sim-headset (sim_headset:=false) contradict "
                "each other: drop one"
            )
        if headset == "sim" and asked_sim is None and not SimQuestSettings.from_config(cfg).enabled:
            raise LaunchError(
                f"{_HEADSET_ARG.format('sim')} and {LAUNCH_SECTION}.sim_quest.enabled=false "
                "contradict each other: drop one"
            )
        return headset
    if asked_sim and mode != "sim":
        raise LaunchError("sim_headset:=true needs the sim graph (the robot has a real headset: native or web)")
    enabled = asked_sim if asked_sim is not None else bool(SimQuestSettings.from_config(cfg).enabled)
    return "sim" if mode == "sim" and enabled else "native"


_HEADSET_ARG = "--headset {0} (headset:={0})"


def sim_headset_enabled(
    mode: str, cfg: Mapping[str, Mapping[str, Any]], sim_headset: str | bool = "", headset: str = ""
) -> bool:
    """Whether the graph starts the simulated headset (``headset_kind`` is sim)."""
    return headset_kind(mode, cfg, sim_headset, headset) == "sim"


SIM_HEADSET_WAY_OUT = (
    "for an external headset start the graph without the simulated one (piper-launch sim "
    "--no-sim-headset, sim.launch.py sim_headset:=false, or piper_launch.sim_quest.enabled=false)"
)


def headset_video(cfg: Mapping[str, Any]) -> bool:
    """Whether to start quest_video (panels + HUD to the headset).

    Yes with a ``quest_video`` section and ``piper_launch.headset_video`` not false.
    """
    return "quest_video" in cfg and bool(cfg.get(LAUNCH_SECTION, {}).get("headset_video", True))
