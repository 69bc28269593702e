//go:build amd64 && !purego && !noasm

#include "textflag.h"

// CLASSIFY classifies the 32 bytes in register V and stores the low or high
// 32 bits (OFF 0 or 4) of each mask of classMasks at DI: l, d, s, sp, nl, ap,
// x at 0, 8, ..., 48. The constants are in Y6-Y15 (see classifyAVX2). Signed
// byte compares: a byte >= 0x80 is negative, so it is in no class but x.
// In order: letters ('a'-1 < b|0x20 < 'z'+1), digits ('0'-1 < b < '9'+1),
// ' ', s (' ' or '\t'), nl ('\n' or '\r'), the apostrophe, and x (b < 0x20
// but not '\t', '\n' or '\r', or DEL).
#define CLASSIFY(V, OFF) \
	VPOR      Y15, V, Y2 \
	VPCMPGTB  Y14, Y2, Y3 \
	VPCMPGTB  Y2, Y13, Y4 \
	VPAND     Y3, Y4, Y3   \
	VPMOVMSKB Y3, AX       \
	MOVL      AX, (0+OFF)(DI) \
	VPCMPGTB  Y12, V, Y3 \
	VPCMPGTB  V, Y11, Y4 \
	VPAND     Y3, Y4, Y3   \
	VPMOVMSKB Y3, AX       \
	MOVL      AX, (8+OFF)(DI) \
	VPCMPEQB  Y15, V, Y3 \
	VPMOVMSKB Y3, AX       \
	MOVL      AX, (24+OFF)(DI) \
	VPCMPEQB  Y9, V, Y4 \
	VPOR      Y3, Y4, Y5   \
	VPMOVMSKB Y5, AX       \
	MOVL      AX, (16+OFF)(DI) \
	VPCMPEQB  Y8, V, Y3 \
	VPCMPEQB  Y7, V, Y5 \
	VPOR      Y3, Y5, Y3   \
	VPMOVMSKB Y3, AX       \
	MOVL      AX, (32+OFF)(DI) \
	VPCMPEQB  Y10, V, Y5 \
	VPMOVMSKB Y5, AX       \
	MOVL      AX, (40+OFF)(DI) \
	VPCMPGTB  V, Y15, Y5 \
	VPOR      Y4, Y3, Y4 \
	VPANDN    Y5, Y4, Y5 \
	VPCMPEQB  Y6, V, Y3 \
	VPOR      Y3, Y5, Y5   \
	VPMOVMSKB Y5, AX       \
	MOVL      AX, (48+OFF)(DI)

#define BCAST(c, Y) \
	MOVL $c, AX        \
	VMOVQ AX, X0       \
	VPBROADCASTB X0, Y

// func classifyAVX2(p *[64]byte, c *classMasks)
TEXT ·classifyAVX2(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), SI
	MOVQ c+8(FP), DI
	BCAST(0x20, Y15)
	BCAST(0x60, Y14)
	BCAST(0x7b, Y13)
	BCAST(0x2f, Y12)
	BCAST(0x3a, Y11)
	BCAST(0x27, Y10)
	BCAST(0x09, Y9)
	BCAST(0x0a, Y8)
	BCAST(0x0d, Y7)
	BCAST(0x7f, Y6)
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1
	CLASSIFY(Y0, 0)
	CLASSIFY(Y1, 4)
	VZEROUPPER
	RET
