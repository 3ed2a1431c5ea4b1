// fleet_test_spin: thread 0 spins until *flag is set; the harness's launch
// timeout must end the launch (kept apart: a module that timed out refuses
// further launches).
extern "C" __global__ void fleet_test_spin(volatile int *flag) {
	if (threadIdx.x == 0) {
		while (*flag == 0) {
		}
	}
}
