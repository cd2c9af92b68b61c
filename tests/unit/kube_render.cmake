# The pure modules of the Kubernetes backend (scheduler/kube: profile, render, placement).
ty_unit_test(test_kube_profile ${CMAKE_CURRENT_LIST_DIR}/test_kube_profile.c ty_kube_render)
target_compile_definitions(test_kube_profile PRIVATE
  TY_EXAMPLE_PROFILE="${PROJECT_SOURCE_DIR}/deploy/cluster-profile.example.yaml")
