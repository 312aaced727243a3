// RUN: not lazymlir-opt %s --stage=linalg 2>&1 | FileCheck %s
// RUN: lazymlir-opt %s --stage=linalg -verify-diagnostics

// Bad input IR: a use of an undefined value is reported with its line, the stage, and a
// reproducer command.
// lazymlir-stage: torch-backend
func.func @relu$undefined(%arg0: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> {
  // expected-error @+1 {{use of undeclared SSA value name}}
  %0 = torch.aten.relu %undefined : !torch.vtensor<[4],f32> -> !torch.vtensor<[4],f32>
  return %0 : !torch.vtensor<[4],f32>
}
// CHECK: lowering stage 'linalg' failed (target cpu):
// CHECK: 9:{{[0-9]+}}: use of undeclared SSA value name
// CHECK: reproduce with: lazymlir-opt --target=cpu --stage=linalg {{.*}}.mlir
