"""server/convert.py, schedule_response: the state a placed pod's response
carries to the binding cycle leaves out the keys only the scheduling cycle
reads (InterPodAffinity's and PodTopologySpread's PreFilter and PreScore
states, as upstream's filtering.go/scoring.go read them only from Filter,
AddPod/RemovePod and Score; NodeAffinity's, TaintToleration's, NodePorts',
VolumeZone's, VolumeRestrictions' and NodeDeclaredFeatures', which upstream
reads only in Filter, AddPod/RemovePod or Score); a response stopped for the
extenders keeps them, since the scheduling cycle goes on with it."""

from __future__ import annotations

from berth.framework.cycle_state import CycleState
from berth.framework.nodeaffinity import RequiredNodeAffinity
from berth.framework.schedule_one import ScheduleResult
from berth.framework.status import SUCCESS
from berth.plugins.interpodaffinity import inter_pod_affinity as ipa
from berth.plugins.nodeaffinity import node_affinity as na
from berth.plugins.nodedeclaredfeatures import node_declared_features as ndf
from berth.plugins.nodeports import node_ports as np_
from berth.plugins.podtopologyspread import pod_topology_spread as pts
from berth.plugins.tainttoleration import taint_toleration as tt
from berth.plugins.volumerestrictions import volume_restrictions as vr
from berth.plugins.volumezone import volume_zone as vz
from berth.server.convert import schedule_response


def _state() -> CycleState:
    s = CycleState()
    s.write(
        ipa.PRE_FILTER_STATE_KEY,
        ipa.PreFilterState({}, {}, {"kubernetes.io/hostname": {"n1": 1}}, [], ["x"], False),
    )
    s.write(ipa.PRE_SCORE_STATE_KEY, ipa.PreScoreState({}))
    s.write(pts.PRE_FILTER_STATE_KEY, pts.PreFilterState())
    s.write(pts.PRE_SCORE_STATE_KEY, pts.PreScoreState())
    s.write(na.PRE_FILTER_STATE_KEY, RequiredNodeAffinity())
    s.write(na.PRE_SCORE_STATE_KEY, na.PreScoreState())
    s.write(tt.PRE_SCORE_STATE_KEY, tt.PreScoreState([]))
    s.write(np_.PRE_FILTER_STATE_KEY, np_.PreFilterState(()))
    s.write(vz.PRE_FILTER_STATE_KEY, vz.PreFilterState(()))
    s.write(vr.PRE_FILTER_STATE_KEY, vr.PreFilterState((), 0))
    s.write(ndf.PRE_FILTER_STATE_KEY, ndf.PreFilterState(()))
    return s


SCHEDULING_ONLY = {
    "PreFilterInterPodAffinity",
    "PreScoreInterPodAffinity",
    "PreFilterPodTopologySpread",
    "PreScorePodTopologySpread",
    "PreFilterNodeAffinity",
    "PreScoreNodeAffinity",
    "PreScoreTaintToleration",
    "PreFilterNodePorts",
    "PreFilterVolumeZone",
    "PreFilterVolumeRestrictions",
    "PreFilterNodeDeclaredFeatures",
}


def test_a_placed_pod_carries_no_scheduling_only_state_to_binding() -> None:
    result = ScheduleResult(SUCCESS, node="n1", permit_status=SUCCESS)
    resp = schedule_response(result, _state(), 1, False)
    assert not SCHEDULING_ONLY & set(resp.cycle.data)
    assert not SCHEDULING_ONLY & set(resp.permit.cycle.data)


def test_a_cycle_stopped_for_extenders_keeps_the_scheduling_state() -> None:
    result = ScheduleResult(SUCCESS, stopped_feasible=("n1",))
    resp = schedule_response(result, _state(), 1, False)
    assert set(resp.cycle.data) == SCHEDULING_ONLY
