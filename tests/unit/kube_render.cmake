# The pure modules of the Kubernetes backend (scheduler/kube: profile, render, placement).
# The example profile is checked against the eksctl cluster it describes.
ty_unit_test(test_kube_profile ${CMAKE_CURRENT_LIST_DIR}/test_kube_profile.c ty_kube_render
             ty_test_support)
target_compile_definitions(test_kube_profile PRIVATE
  TY_EXAMPLE_PROFILE="${PROJECT_SOURCE_DIR}/deploy/cluster-profile.example.yaml"
  TY_EKSCTL_CONFIG="${PROJECT_SOURCE_DIR}/deploy/eksctl/cluster.yaml")
# Rendering is golden-tested; every object is validated against the v1.26 schemas and the
# Volcano CRD. spec_job() (ty_api) normalizes the input specs as submission does.
ty_unit_test(test_kube_render ${CMAKE_CURRENT_LIST_DIR}/test_kube_render.c ty_kube_render
             ty_api ty_test_support)
target_compile_definitions(test_kube_render PRIVATE
  TY_EXAMPLE_PROFILE="${PROJECT_SOURCE_DIR}/deploy/cluster-profile.example.yaml"
  TY_GOLDEN_DIR="${PROJECT_SOURCE_DIR}/tests/fixtures/kube-render"
  TY_K8S_OPENAPI_DIR="${PROJECT_SOURCE_DIR}/tests/fixtures/kubernetes-openapi"
  TY_CRDS_DIR="${PROJECT_SOURCE_DIR}/tests/fixtures/crds")
ty_unit_test(test_kube_placement ${CMAKE_CURRENT_LIST_DIR}/test_kube_placement.c ty_kube_render)
target_compile_definitions(test_kube_placement PRIVATE
  TY_EXAMPLE_PROFILE="${PROJECT_SOURCE_DIR}/deploy/cluster-profile.example.yaml")
ty_unit_test(test_kube_inventory ${CMAKE_CURRENT_LIST_DIR}/test_kube_inventory.c
             ty_kube_inventory)
# The slim records the backend's informers keep, made from what their watches parse (picks),
# on every Pod and Job of the recorded v1.26 transcripts.
ty_unit_test(test_kube_events ${CMAKE_CURRENT_LIST_DIR}/test_kube_events.c ty_kube_backend)
target_compile_definitions(test_kube_events PRIVATE
  TY_TRANSCRIPTS_DIR="${PROJECT_SOURCE_DIR}/tests/fixtures/kubernetes-transcripts")
